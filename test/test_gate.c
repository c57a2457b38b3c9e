#include <uv.h>

#include "gate.h"
#include "test.h"

static int available;
static int order[8], norder;
static int timeouts;

static int wake(ephd_waiter_t *w) {
  if (available == 0) return 0;
  available--;
  ephd_gate_unpark(w);
  order[norder++] = (int)w->batch; /* batch doubles as an id here */
  return 1;
}

static void timeout(ephd_waiter_t *w) {
  (void)w;
  timeouts++;
}

TEST_IMPL(gate_wakes_in_order) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  ephd_gate_t g;
  uint64_t parked = 0;
  ephd_gate_init(&g, &parked);
  ephd_waiter_t w[3];
  norder = 0;
  for (int i = 0; i < 3; i++) {
    ephd_waiter_init(&loop, &w[i], wake, timeout);
    w[i].batch = (uint32_t)i;
    ephd_gate_park(&g, &w[i], 60000);
  }
  available = 2;
  ephd_gate_wake(&g, NULL);
  ASSERT_EQ(norder, 2);
  ASSERT_EQ(order[0], 0);
  ASSERT_EQ(order[1], 1);
  ASSERT_EQ(g.count, 1);
  ASSERT_EQ(parked, 1);
  ephd_gate_wake(&g, NULL); /* nothing available: the waiter stays */
  ASSERT_EQ(g.count, 1);
  for (int i = 0; i < 3; i++) ephd_waiter_close(&w[i], NULL);
  ASSERT_EQ(g.count, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  return 0;
}

TEST_IMPL(gate_timeout) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  ephd_gate_t g;
  ephd_gate_init(&g, NULL);
  ephd_waiter_t w;
  ephd_waiter_init(&loop, &w, wake, timeout);
  timeouts = 0;
  ephd_gate_park(&g, &w, 5);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(timeouts, 1);
  ASSERT_EQ(g.count, 0);
  ASSERT(w.gate == NULL);
  ephd_waiter_close(&w, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  return 0;
}
