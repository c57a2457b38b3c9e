#include <stdlib.h>

#include "ring.h"
#include "test.h"

static void push(ephd_ring_t *r, uint64_t n) {
  char payload[16];
  int len = snprintf(payload, sizeof(payload), "%llu", (unsigned long long)n);
  ephd_ring_append(r, 0, payload, (uint32_t)len);
}

/* The number a test message was pushed with. */
static long long at(ephd_ring_t *r, uint64_t pos) {
  ephd_msg_t *m = ephd_ring_at(r, pos);
  char tmp[16];
  memcpy(tmp, m->payload, m->len);
  tmp[m->len] = 0;
  return atoll(tmp);
}

TEST_IMPL(ring_fifo_and_reclaim) {
  ephd_ring_t *r = ephd_ring_new("p", 1);
  ephd_ring_add_cursor(r);
  for (uint64_t i = 1; i <= 100; i++) push(r, i);
  ASSERT_EQ(ephd_ring_depth(r), 100);
  uint64_t pos;
  uint32_t attempts;
  int redo;
  for (uint64_t i = 1; i <= 100; i++) {
    ASSERT(ephd_ring_take(r, &r->cursors[0], &pos, &attempts, &redo));
    ASSERT_EQ(at(r, pos), i);
    ASSERT_EQ(redo, 0);
  }
  ASSERT(!ephd_ring_take(r, &r->cursors[0], &pos, &attempts, &redo));
  ephd_ring_reclaim(r);
  ASSERT_EQ(ephd_ring_depth(r), 0);
  ASSERT_EQ(r->bytes, 0);
  ephd_ring_free(r);
  return 0;
}

TEST_IMPL(ring_keeps_messages_without_groups) {
  ephd_ring_t *r = ephd_ring_new("p", 1);
  push(r, 1);
  ephd_ring_reclaim(r);
  ASSERT_EQ(ephd_ring_depth(r), 1);
  /* A group that arrives later starts at the head and still sees it. */
  ephd_ring_add_cursor(r);
  ASSERT_EQ(ephd_ring_available(r, &r->cursors[0]), 1);
  ephd_ring_free(r);
  return 0;
}

TEST_IMPL(ring_evict_skips_cursors) {
  ephd_ring_t *r = ephd_ring_new("p", 1);
  ephd_ring_add_cursor(r); /* slow group: at the head */
  ephd_ring_add_cursor(r); /* fast group: takes two first */
  for (uint64_t i = 1; i <= 4; i++) push(r, i);
  uint64_t pos;
  uint32_t attempts;
  int redo;
  ephd_ring_take(r, &r->cursors[1], &pos, &attempts, &redo);
  ephd_ring_take(r, &r->cursors[1], &pos, &attempts, &redo);
  ephd_ring_evict_head(r);
  ephd_ring_evict_head(r);
  ASSERT_EQ(r->cursors[0].skipped, 2);
  ASSERT_EQ(r->cursors[1].skipped, 0);
  ASSERT(ephd_ring_take(r, &r->cursors[0], &pos, &attempts, &redo));
  ASSERT_EQ(at(r, pos), 3);
  ephd_ring_free(r);
  return 0;
}

TEST_IMPL(ring_redelivery_first) {
  ephd_ring_t *r = ephd_ring_new("p", 1);
  ephd_ring_add_cursor(r);
  push(r, 1);
  push(r, 2);
  uint64_t pos;
  uint32_t attempts;
  int redo;
  ephd_ring_take(r, &r->cursors[0], &pos, &attempts, &redo);
  ephd_ring_redeliver(r, &r->cursors[0], pos, 1);
  ASSERT(ephd_ring_take(r, &r->cursors[0], &pos, &attempts, &redo));
  ASSERT_EQ(at(r, pos), 1);
  ASSERT_EQ(attempts, 1);
  ASSERT_EQ(redo, 1);
  ASSERT(ephd_ring_take(r, &r->cursors[0], &pos, &attempts, &redo));
  ASSERT_EQ(at(r, pos), 2);
  ASSERT_EQ(attempts, 0);
  ephd_ring_free(r);
  return 0;
}

/* Ready answers as take would, with dead redeliveries (their message
 * evicted) in front of live ones, behind them, and alone. */
TEST_IMPL(ring_ready_past_dead_redeliveries) {
  ephd_ring_t *r = ephd_ring_new("p", 1);
  ephd_ring_add_cursor(r);
  ephd_cursor_t *c = &r->cursors[0];
  for (uint64_t i = 1; i <= 4; i++) push(r, i);
  uint64_t pos, first = r->head;
  uint32_t attempts;
  int redo;
  while (ephd_ring_take(r, c, &pos, &attempts, &redo)) continue;
  ASSERT(!ephd_ring_ready(r, c));
  ephd_ring_redeliver(r, c, first, 1);     /* dies below */
  ephd_ring_redeliver(r, c, first + 3, 1); /* lives */
  ephd_ring_redeliver(r, c, first + 1, 1); /* dies below */
  ephd_ring_evict_head(r);
  ephd_ring_evict_head(r);
  ASSERT(ephd_ring_ready(r, c));
  ASSERT_EQ(ephd_ring_available(r, c), 1);
  ASSERT(ephd_ring_take(r, c, &pos, &attempts, &redo));
  ASSERT_EQ(at(r, pos), 4);
  ASSERT(!ephd_ring_ready(r, c));
  ASSERT(!ephd_ring_take(r, c, &pos, &attempts, &redo));
  /* Dead alone: ready gives their array back, as a take would. */
  ephd_ring_redeliver(r, c, r->head, 1);
  ephd_ring_evict_head(r);
  ASSERT(c->redo != NULL);
  ASSERT(!ephd_ring_ready(r, c));
  ASSERT(c->redo == NULL);
  ASSERT_EQ(c->redo_cap, 0);
  ephd_ring_free(r);
  return 0;
}

/* The redelivery FIFO kept the array its busiest moment needed: it halves
 * as it drains, keeps its order through each halving, and gives its array
 * back once empty, as clear does. */
TEST_IMPL(ring_redelivery_fifo_shrinks) {
  ephd_ring_t *r = ephd_ring_new("p", 1);
  ephd_ring_add_cursor(r);
  ephd_cursor_t *c = &r->cursors[0];
  for (uint64_t i = 1; i <= 1000; i++) push(r, i);
  uint64_t pos;
  uint32_t attempts;
  int redo;
  uint64_t first = r->head;
  while (ephd_ring_take(r, c, &pos, &attempts, &redo)) continue;
  for (uint64_t p = first; p < first + 1000; p++)
    ephd_ring_redeliver(r, c, p, 1);
  ASSERT_EQ(c->redo_len, 1000);
  ASSERT_EQ(c->redo_cap, 1024);
  for (uint64_t i = 1; i < 1000; i++) {
    ASSERT(ephd_ring_take(r, c, &pos, &attempts, &redo));
    ASSERT_EQ(at(r, pos), i);
    ASSERT_EQ(redo, 1);
    ASSERT(c->redo_cap <= 4 || c->redo_len * 8 >= c->redo_cap);
  }
  ASSERT_EQ(c->redo_len, 1);
  ASSERT(c->redo_cap <= 8);
  ASSERT(ephd_ring_take(r, c, &pos, &attempts, &redo));
  ASSERT_EQ(at(r, pos), 1000);
  ASSERT(c->redo == NULL);
  ASSERT_EQ(c->redo_cap, 0);
  ephd_ring_redeliver(r, c, pos, 2);
  ephd_ring_clear(r);
  ASSERT(c->redo == NULL);
  ASSERT_EQ(c->redo_len, 0);
  ephd_ring_free(r);
  return 0;
}

/* Dead redeliveries leave the FIFO together, not one by one: 63 of 64
 * dropped at once left the one live entry in 16 slots after one halving
 * (found by fuzz_engine). */
TEST_IMPL(ring_redelivery_fifo_fits_after_dropping_many) {
  ephd_ring_t *r = ephd_ring_new("p", 1);
  ephd_ring_add_cursor(r);
  ephd_cursor_t *c = &r->cursors[0];
  for (uint64_t i = 1; i <= 64; i++) push(r, i);
  uint64_t pos, first = r->head;
  uint32_t attempts;
  int redo;
  while (ephd_ring_take(r, c, &pos, &attempts, &redo)) continue;
  for (uint64_t p = first; p < first + 64; p++) ephd_ring_redeliver(r, c, p, 1);
  ASSERT_EQ(c->redo_cap, 64);
  for (int i = 0; i < 63; i++) ephd_ring_evict_head(r);
  ASSERT(ephd_ring_ready(r, c));
  ASSERT_EQ(c->redo_len, 1);
  ASSERT(c->redo_cap <= 8);
  ASSERT(ephd_ring_take(r, c, &pos, &attempts, &redo));
  ASSERT_EQ(at(r, pos), 64);
  ASSERT(c->redo == NULL);
  ephd_ring_free(r);
  return 0;
}

/* One message left of 1,000 kept the 1,024 slots they needed. */
TEST_IMPL(ring_slot_array_shrinks) {
  ephd_ring_t *r = ephd_ring_new("p", 1);
  ephd_ring_add_cursor(r);
  for (uint64_t i = 1; i <= 1000; i++) push(r, i);
  ASSERT_EQ(r->cap, 1024);
  uint64_t pos;
  uint32_t attempts;
  int redo;
  for (int i = 0; i < 999; i++)
    ASSERT(ephd_ring_take(r, &r->cursors[0], &pos, &attempts, &redo));
  ephd_ring_reclaim(r);
  ASSERT_EQ(ephd_ring_depth(r), 1);
  ASSERT(r->cap <= 64);
  ASSERT_EQ(at(r, r->head), 1000);
  ephd_ring_free(r);
  return 0;
}
