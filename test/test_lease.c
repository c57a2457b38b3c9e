#include <stdlib.h>
#include <uv.h>

#include "lease.h"
#include "test.h"

static uint64_t expired[64];
static int nexpired;

static void record(ephd_lease_t *l, void *data) {
  (void)data;
  expired[nexpired++] = l->deadline_ms;
}

TEST_IMPL(lease_heap_orders_deadlines) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  ephd_leases_t ls;
  ephd_leases_init(&ls, &loop, record, NULL);
  ephd_lease_t l[32];
  nexpired = 0;
  for (int i = 0; i < 32; i++) {
    l[i].deadline_ms = (uint64_t)((i * 7919) % 32) + 1000000;
    ephd_leases_add(&ls, &l[i]);
  }
  ephd_leases_expire(&ls, 1000000 + 15);
  ASSERT_EQ(nexpired, 16);
  for (int i = 1; i < nexpired; i++) ASSERT(expired[i - 1] <= expired[i]);
  ASSERT_EQ(ls.len, 16);
  ephd_leases_close(&ls);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  return 0;
}

TEST_IMPL(lease_remove_from_middle) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  ephd_leases_t ls;
  ephd_leases_init(&ls, &loop, record, NULL);
  ephd_lease_t l[10];
  nexpired = 0;
  for (int i = 0; i < 10; i++) {
    l[i].deadline_ms = 1000000 + (uint64_t)i;
    ephd_leases_add(&ls, &l[i]);
  }
  ephd_leases_remove(&ls, &l[3]);
  ephd_leases_remove(&ls, &l[0]);
  ephd_leases_expire(&ls, 2000000);
  ASSERT_EQ(nexpired, 8);
  for (int i = 0; i < nexpired; i++) {
    ASSERT_NE(expired[i], 1000000 + 3);
    ASSERT_NE(expired[i], 1000000 + 0);
    if (i) ASSERT(expired[i - 1] < expired[i]);
  }
  ephd_leases_close(&ls);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  return 0;
}

TEST_IMPL(lease_timer_fires) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  ephd_leases_t ls;
  ephd_leases_init(&ls, &loop, record, NULL);
  /* The lease timer does not keep a loop alive on its own; hold it here. */
  uv_ref((uv_handle_t *)&ls.timer);
  ephd_lease_t l = {0};
  nexpired = 0;
  l.deadline_ms = uv_now(&loop) + 5;
  ephd_leases_add(&ls, &l);
  while (nexpired == 0) uv_run(&loop, UV_RUN_ONCE);
  ASSERT_EQ(nexpired, 1);
  ASSERT_EQ(ls.len, 0);
  ephd_leases_close(&ls);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  return 0;
}

/* A burst of deliveries, settled, leaves the heap near its working size:
 * what the broker holds stays within what each lease is charged. */
TEST_IMPL(lease_heap_gives_back_a_burst) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  ephd_leases_t ls;
  ephd_leases_init(&ls, &loop, record, NULL);
  enum { BURST = 4096 };
  ephd_lease_t *l = calloc(BURST, sizeof(*l));
  ASSERT(l != NULL);
  for (int i = 0; i < BURST; i++) {
    l[i].deadline_ms = 1000000 + (uint64_t)i;
    ephd_leases_add(&ls, &l[i]);
  }
  ASSERT_EQ(ls.cap, BURST);
  for (int i = BURST - 1; i >= 10; i--) {
    ephd_leases_remove(&ls, &l[i]);
    ASSERT(ls.cap <= EPHD_LEASES_MIN || ls.cap <= 4 * ls.len);
  }
  ASSERT_EQ(ls.len, 10);
  ASSERT_EQ(ls.cap, EPHD_LEASES_MIN);
  nexpired = 0;
  ephd_leases_expire(&ls, 2000000);
  ASSERT_EQ(nexpired, 10);
  for (int i = 1; i < nexpired; i++) ASSERT(expired[i - 1] < expired[i]);
  ephd_leases_close(&ls);
  free(l);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  return 0;
}
