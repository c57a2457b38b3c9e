#include <stddef.h>

#include "gate.h"
#include "test.h"

/* A parked pop of the gate tests: an id, and whether it was answered by a
 * wake or by a flush. */
typedef struct {
  ephd_waiter_t w;
  int id;
} test_waiter_t;

static int available;
static int order[8], norder;
static int flushed[8], nflushed;

static int wake(ephd_waiter_t *w) {
  if (available == 0) return 0;
  available--;
  ephd_gate_unpark(w);
  order[norder++] = ((test_waiter_t *)w)->id;
  return 1;
}

static void flush(ephd_waiter_t *w) {
  flushed[nflushed++] = ((test_waiter_t *)w)->id;
}

static void park_three(ephd_gate_t *g, test_waiter_t *w) {
  for (int i = 0; i < 3; i++) {
    ephd_waiter_init(&w[i].w, wake, flush);
    w[i].id = i;
    ephd_gate_park(g, &w[i].w);
  }
}

TEST_IMPL(gate_wakes_in_order) {
  ephd_gate_t g;
  uint64_t parked = 0;
  ephd_gate_init(&g, &parked);
  test_waiter_t w[3];
  norder = 0;
  park_three(&g, w);
  available = 2;
  ephd_gate_wake(&g, NULL);
  ASSERT_EQ(norder, 2);
  ASSERT_EQ(order[0], 0);
  ASSERT_EQ(order[1], 1);
  ASSERT_EQ(ephd_gate_count(&g), 1);
  ASSERT_EQ(parked, 1);
  ephd_gate_wake(&g, NULL); /* nothing available: the waiter stays */
  ASSERT_EQ(ephd_gate_count(&g), 1);
  for (int i = 0; i < 3; i++) ephd_gate_unpark(&w[i].w);
  ASSERT_EQ(ephd_gate_count(&g), 0);
  ASSERT_EQ(parked, 0);
  return 0;
}

/* A gate going away (its queue deleted) answers every waiter, in order,
 * each already off the gate when it is answered. */
TEST_IMPL(gate_flush) {
  ephd_gate_t g;
  uint64_t parked = 0;
  ephd_gate_init(&g, &parked);
  test_waiter_t w[3];
  nflushed = 0;
  park_three(&g, w);
  ephd_gate_unpark(&w[1].w); /* its client left */
  ephd_gate_flush(&g);
  ASSERT_EQ(nflushed, 2);
  ASSERT_EQ(flushed[0], 0);
  ASSERT_EQ(flushed[1], 2);
  ASSERT_EQ(ephd_gate_count(&g), 0);
  ASSERT_EQ(parked, 0);
  for (int i = 0; i < 3; i++) ASSERT(w[i].w.gate == NULL);
  return 0;
}
