#include <stdlib.h>
#include <uv.h>

#include "engine.h"
#include "ffi.h"
#include "id.h"
#include "test.h"
#include "transfer.h"

static uv_loop_t loop;
static ephd_engine_t e;
static ephd_tenant_limits_t limits; /* 0: no limit */

static void start(uint64_t max_bytes, uint64_t max_length, int drop_oldest,
                  uint64_t cell) {
  memset(&limits, 0, sizeof(limits));
  uv_loop_init(&loop);
  ephd_engine_config_t config = {
      .epoch = 0xabc,
      .defaults = {max_bytes, max_length, drop_oldest, 0, 30, 3, 0, 0},
      .max_cell_bytes = cell,
      .idle_ms = 60000,
  };
  ephd_engine_init(&e, &loop, &config);
}

static int stop(void) {
  ephd_engine_close(&e);
  uv_run(&loop, UV_RUN_DEFAULT);
  return uv_loop_close(&loop);
}

static ephd_queue_t *queue(void) {
  return ephd_engine_queue_open(&e, "t", 1, "q", 1);
}

/* Pushes n one-byte-per-digit payloads "1", "2", ... starting at first,
 * planned first as the daemon does; returns the refusals. */
static uint32_t push(ephd_queue_t *q, const char *part, int first, int n,
                     uint64_t now) {
  char base[1024];
  ephd_span_t spans[64];
  uint32_t off = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < n; i++) {
    int len = snprintf(base + off, sizeof(base) - off, "%d", first + i);
    spans[i].off = off;
    spans[i].len = (uint32_t)len;
    off += (uint32_t)len;
    bytes += (uint64_t)len;
  }
  ephd_ring_t *r = ephd_queue_ring_open(q, part, strlen(part));
  ephd_engine_expire(&e, q, now);
  ephd_push_plan_t plan;
  ephd_engine_plan_push(&e, q->tenant, 1, q, 1, r, strlen(part), (uint32_t)n,
                        bytes, &limits, NULL, &plan);
  if (plan.refusals == 0)
    ephd_engine_push(&e, q, r, base, spans, (uint32_t)n, &plan, now);
  return plan.refusals;
}

static uint32_t pop(ephd_queue_t *q, const char *group, uint32_t batch,
                    uint64_t now, ephd_buf_t *out) {
  uint32_t g = ephd_queue_group_open(q, group, strlen(group));
  out->len = 0;
  return ephd_engine_pop(&e, q, NULL, g, batch, 0, now, out, SIZE_MAX);
}

/* The id of the first delivery in a pop body. */
static size_t first_id(const ephd_buf_t *b, char *id, size_t cap) {
  const char *p = memmem(b->base, b->len, "\"id\":\"", 6);
  if (!p) return 0;
  p += 6;
  const char *q = memchr(p, '"', (size_t)(b->base + b->len - p));
  size_t n = (size_t)(q - p);
  if (n >= cap) return 0;
  memcpy(id, p, n);
  return n;
}

/* The payloads of a pop body, in order, as one string ("1,2,3"). */
static void payloads(const ephd_buf_t *b, char *out, size_t cap) {
  size_t n = 0;
  const char *p = b->base, *end = b->base + b->len;
  out[0] = 0;
  while ((p = memmem(p, (size_t)(end - p), "\"payload\":", 10))) {
    p += 10;
    const char *q = p;
    while (q < end && *q != '}') q++;
    n += (size_t)snprintf(out + n, cap - n, "%s%.*s", n ? "," : "",
                          (int)(q - p), p);
    p = q;
  }
}

TEST_IMPL(engine_push_reject_all_or_nothing) {
  start(1000, 5, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ASSERT_EQ(push(q, "p", 1, 3, 0), 0);
  ASSERT_EQ(push(q, "p", 4, 3, 0), EPHD_REFUSE_QUEUE_FULL);
  ASSERT_EQ(q->depth, 3); /* nothing of the refused push was appended */
  ASSERT_EQ(push(q, "p", 4, 2, 0), 0);
  ASSERT_EQ(q->depth, 5);
  ASSERT_EQ(q->drops_bounds, 0);
  return stop();
}

/* The bounds are the queue's, over its partitions (Queen's): maxLength 2
 * and three pushes to three partitions, the third refused. */
TEST_IMPL(engine_bounds_span_partitions) {
  start(1000, 2, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ASSERT_EQ(push(q, "p1", 1, 1, 0), 0);
  ASSERT_EQ(push(q, "p2", 2, 1, 0), 0);
  ASSERT_EQ(push(q, "p3", 3, 1, 0), EPHD_REFUSE_QUEUE_FULL);
  ASSERT_EQ(q->depth, 2);
  ASSERT_EQ(ephd_ring_depth(ephd_queue_ring(q, "p3", 2)), 0);
  ASSERT_EQ(stop(), 0);
  /* maxBytes likewise: 3 bytes of one-byte payloads. */
  start(3, 100, 0, 1 << 20);
  q = queue();
  ASSERT_EQ(push(q, "p1", 1, 2, 0), 0); /* "1", "2" */
  ASSERT_EQ(push(q, "p2", 3, 1, 0), 0); /* "3" */
  ASSERT_EQ(push(q, "p3", 4, 1, 0), EPHD_REFUSE_QUEUE_FULL);
  ASSERT_EQ(q->bytes, 3);
  return stop();
}

/* dropOldest evicts from the target partition's head only: room another
 * partition holds is not its to take, and a push that could fit only so
 * is refused whole, evicting nothing. */
TEST_IMPL(engine_drop_oldest_within_its_partition) {
  start(1000, 3, 1, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_buf_t out;
  ephd_buf_init(&out);
  pop(q, "g", 1, 0, &out); /* a group, so nothing is reclaimed */
  ASSERT_EQ(push(q, "p1", 1, 2, 0), 0);
  ASSERT_EQ(push(q, "p2", 3, 1, 0), 0);
  /* Full: a push to p1 evicts p1's oldest. */
  ASSERT_EQ(push(q, "p1", 4, 1, 0), 0);
  ASSERT_EQ(q->depth, 3);
  ASSERT_EQ(q->drops_bounds, 1);
  ASSERT_EQ(ephd_ring_depth(ephd_queue_ring(q, "p2", 2)), 1);
  /* Two to p2 would need p1's messages too: refused, nothing evicted. */
  ASSERT_EQ(push(q, "p2", 5, 2, 0), EPHD_REFUSE_QUEUE_CROWDED);
  ASSERT_EQ(q->depth, 3);
  ASSERT_EQ(q->drops_bounds, 1);
  /* A new partition has nothing to evict. */
  ASSERT_EQ(push(q, "p3", 7, 1, 0), EPHD_REFUSE_QUEUE_CROWDED);
  ASSERT_EQ(q->depth, 3);
  /* One to p2 fits by evicting p2's own. */
  ASSERT_EQ(push(q, "p2", 8, 1, 0), 0);
  ASSERT_EQ(q->drops_bounds, 2);
  out.len = 0;
  ASSERT_EQ(pop(q, "g", 10, 0, &out), 3);
  char got[64];
  payloads(&out, got, sizeof(got));
  ASSERT(strcmp(got, "2,4,8") == 0 || strcmp(got, "8,2,4") == 0);
  ephd_buf_free(&out);
  return stop();
}

TEST_IMPL(engine_push_drop_oldest) {
  start(1000, 5, 1, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_buf_t out;
  ephd_buf_init(&out);
  pop(q, "slow", 1, 0, &out); /* registers the group at the head */
  ASSERT_EQ(push(q, "p", 1, 5, 0), 0);
  ASSERT_EQ(push(q, "p", 6, 3, 0), 0);
  ASSERT_EQ(q->depth, 5);
  ASSERT_EQ(q->drops_bounds, 3);
  ASSERT_EQ(q->tenant->drops_bounds, 3); /* kept past the queue's life */
  ASSERT_EQ(pop(q, "slow", 1, 0, &out), 1);
  ASSERT(memmem(out.base, out.len, "\"payload\":4}", 12) != NULL);
  ephd_ring_t *r = ephd_queue_ring(q, "p", 1);
  ASSERT_EQ(r->cursors[0].skipped, 3);
  ephd_buf_free(&out);
  return stop();
}

TEST_IMPL(engine_push_too_big_for_empty_ring) {
  start(1000, 2, 1, 1 << 20);
  ephd_queue_t *q = queue();
  ASSERT_EQ(push(q, "p", 1, 2, 0), 0);
  ASSERT_EQ(push(q, "p", 3, 3, 0), EPHD_REFUSE_QUEUE_TOO_SMALL);
  ASSERT_EQ(q->depth, 2); /* dropOldest evicted nothing for a hopeless push */
  ASSERT_EQ(q->drops_bounds, 0);
  return stop();
}

/* The cell counts what the broker holds: names, structures and each
 * message's overhead as well as its payload. */
TEST_IMPL(engine_cell_budget) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ASSERT_EQ(push(q, "p", 1, 5, 0), 0); /* five one-byte payloads */
  ASSERT_EQ(q->bytes, 5);
  ASSERT_EQ(e.cell_bytes, ephd_cost_tenant(1) + ephd_cost_queue(1) +
                              ephd_cost_ring(1) + 5 * (1 + EPHD_COST_MSG) +
                              8 * EPHD_COST_SLOT + EPHD_ALLOC_OVERHEAD);
  e.max_cell_bytes = e.cell_bytes + EPHD_COST_MSG;
  ASSERT_EQ(push(q, "p", 6, 1, 0), EPHD_REFUSE_CELL_BYTES);
  ASSERT_EQ(q->depth, 5);
  e.max_cell_bytes++;
  ASSERT_EQ(push(q, "p", 6, 1, 0), 0);
  return stop();
}

TEST_IMPL(engine_ttl_head_drop) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  q->opts.ttl_s = 2;
  push(q, "p", 1, 2, 1000);
  push(q, "p", 3, 1, 2500);
  ephd_engine_expire(&e, q, 2999);
  ASSERT_EQ(q->depth, 3);
  ephd_engine_expire(&e, q, 3000);
  ASSERT_EQ(q->depth, 1);
  ASSERT_EQ(q->drops_ttl, 2);
  ASSERT_EQ(q->tenant->drops_ttl, 2);
  ASSERT_EQ(q->bytes, 1);
  return stop();
}

TEST_IMPL(engine_retry_limit_drops) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue(); /* retryLimit 3 */
  push(q, "p", 1, 1, 0);
  ephd_buf_t out;
  ephd_buf_init(&out);
  char id[64];
  uint32_t g = ephd_queue_group_open(q, "g", 1);
  for (int attempt = 0; attempt < 3; attempt++) {
    ASSERT_EQ(pop(q, "g", 1, 0, &out), 1);
    char want[32];
    snprintf(want, sizeof(want), "\"attempts\":%d", attempt);
    ASSERT(memmem(out.base, out.len, want, strlen(want)) != NULL);
    size_t n = first_id(&out, id, sizeof(id));
    ephd_outcome_t o = ephd_engine_ack(&e, q, g, id, n, EPHD_ACK_FAILED, 0);
    ASSERT_EQ(o, attempt < 2 ? EPHD_OUTCOME_REDELIVERED : EPHD_OUTCOME_ACKED);
  }
  ASSERT_EQ(q->drops_retry, 1);
  ASSERT_EQ(q->tenant->drops_retry, 1);
  ASSERT_EQ(pop(q, "g", 1, 0, &out), 0);
  ASSERT_EQ(q->depth, 0); /* the only group is done with it: reclaimed */
  ephd_buf_free(&out);
  return stop();
}

TEST_IMPL(engine_lease_expiry_redelivers) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  push(q, "p", 1, 1, 0);
  ephd_buf_t out;
  ephd_buf_init(&out);
  ASSERT_EQ(pop(q, "g", 1, 0, &out), 1);
  char id[64];
  size_t n = first_id(&out, id, sizeof(id));
  ASSERT_EQ(pop(q, "g", 1, 0, &out), 0); /* leased: not deliverable */
  ephd_leases_expire(&e.leases, 30 * 1000);
  ASSERT_EQ(pop(q, "g", 1, 31000, &out), 1);
  ASSERT(memmem(out.base, out.len, "\"attempts\":1", 12) != NULL);
  uint32_t g = ephd_queue_group_open(q, "g", 1);
  /* The expired lease is gone: its id now answers unknown... */
  ASSERT_EQ(ephd_engine_ack(&e, q, g, id, n, EPHD_ACK_COMPLETED, 0),
            EPHD_OUTCOME_UNKNOWN);
  /* ...while a different epoch's id is stale. */
  ASSERT_EQ(
      ephd_engine_ack(&e, q, g, "e:00000001:p:1", 14, EPHD_ACK_COMPLETED, 0),
      EPHD_OUTCOME_STALE);
  ephd_buf_free(&out);
  return stop();
}

TEST_IMPL(engine_groups_see_every_message) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_buf_t out;
  ephd_buf_init(&out);
  pop(q, "a", 1, 0, &out);
  pop(q, "b", 1, 0, &out);
  push(q, "p", 1, 4, 0);
  ASSERT_EQ(pop(q, "a", 10, 0, &out), 4);
  ASSERT_EQ(pop(q, "b", 10, 0, &out), 4);
  ASSERT_EQ(pop(q, "a", 10, 0, &out), 0);
  ephd_buf_free(&out);
  return stop();
}

/* A relayed pop's batch stops once it has written its bytes, past its one
 * delivery; what it did not take stays for the next pop, whole partitions
 * and all. */
TEST_IMPL(engine_pop_stops_at_its_byte_bound) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_buf_t out;
  ephd_buf_init(&out);
  uint32_t g = ephd_queue_group_open(q, "g", 1);
  push(q, "p", 1, 3, 0);
  push(q, "r", 4, 3, 0);
  ASSERT_EQ(ephd_engine_pop(&e, q, NULL, g, 10, 1, 0, &out, 1), 1);
  size_t one = out.len;
  out.len = 0;
  ASSERT_EQ(ephd_engine_pop(&e, q, NULL, g, 10, 1, 0, &out, one + 1), 2);
  /* The bound counts from what out held before: an answer's head. */
  out.len = 0;
  ephd_buf_appends(&out, "{\"queue\":\"q\",\"messages\":[");
  ASSERT_EQ(ephd_engine_pop(&e, q, NULL, g, 10, 1, 0, &out, 1), 1);
  ASSERT_EQ(ephd_engine_pop(&e, q, NULL, g, 10, 1, 0, &out, SIZE_MAX), 2);
  ASSERT_EQ(ephd_engine_pop(&e, q, NULL, g, 10, 1, 0, &out, SIZE_MAX), 0);
  ephd_buf_free(&out);
  return stop();
}

TEST_IMPL(engine_evicted_lease_is_unknown) {
  start(1000, 2, 1, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_buf_t out;
  ephd_buf_init(&out);
  push(q, "p", 1, 2, 0);
  ASSERT_EQ(pop(q, "g", 1, 0, &out), 1);
  char id[64];
  size_t n = first_id(&out, id, sizeof(id));
  push(q, "p", 3, 2, 0); /* evicts both, including the leased one */
  ASSERT_EQ(e.leases.len, 0);
  uint32_t g = ephd_queue_group_open(q, "g", 1);
  ASSERT_EQ(ephd_engine_ack(&e, q, g, id, n, EPHD_ACK_COMPLETED, 0),
            EPHD_OUTCOME_UNKNOWN);
  ephd_buf_free(&out);
  return stop();
}

TEST_IMPL(engine_wipe_fences_old_ids) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_buf_t out;
  ephd_buf_init(&out);
  push(q, "p", 1, 3, 0);
  push(q, "o", 1, 1, 0);
  ephd_ring_t *r = ephd_queue_ring(q, "p", 1);
  uint32_t g = ephd_queue_group_open(q, "g", 1);
  uint64_t footprint = q->footprint;
  char id[64];
  out.len = 0;
  ASSERT_EQ(ephd_engine_pop(&e, q, r, g, 1, 0, 0, &out, SIZE_MAX), 1);
  size_t n = first_id(&out, id, sizeof(id));
  uint64_t bytes;
  ASSERT_EQ(ephd_engine_wipe(&e, q, r, &bytes), 3);
  ASSERT_EQ(bytes, 3);
  ASSERT_EQ(e.leases.len, 0);
  ASSERT_EQ(ephd_queue_ring(q, "p", 1), r); /* kept, empty, for its fence */
  ASSERT(q->footprint < footprint);
  ASSERT_EQ(e.cell_bytes, ephd_cost_tenant(1) + q->footprint);
  ephd_queue_info_t info;
  ephd_queue_info(q, &info);
  ASSERT_EQ(info.depth, 1); /* the other partition is untouched */
  /* The copy that issued the id is gone: stale, not unknown. */
  ASSERT_EQ(ephd_engine_ack(&e, q, g, id, n, EPHD_ACK_COMPLETED, 0),
            EPHD_OUTCOME_STALE);
  /* The partition moved back is served as new, its new ids settle. */
  push(q, "p", 7, 1, 0);
  out.len = 0;
  ASSERT_EQ(ephd_engine_pop(&e, q, r, g, 1, 0, 0, &out, SIZE_MAX), 1);
  n = first_id(&out, id, sizeof(id));
  ASSERT_EQ(ephd_engine_ack(&e, q, g, id, n, EPHD_ACK_COMPLETED, 0),
            EPHD_OUTCOME_ACKED);
  ASSERT_EQ(ephd_engine_ack(&e, q, g, id, n, EPHD_ACK_COMPLETED, 0),
            EPHD_OUTCOME_UNKNOWN);
  ephd_buf_free(&out);
  return stop();
}

TEST_IMPL(engine_accepts_a_transfer) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_buf_t out, wire;
  ephd_buf_init(&out);
  ephd_buf_init(&wire);
  push(q, "p", 1, 5, 0);
  ephd_ring_t *r = ephd_queue_ring(q, "p", 1);
  uint32_t g = ephd_queue_group_open(q, "g", 1);
  ephd_queue_group_open(q, "h", 1);
  char id[64];
  /* g: 1 acked, 2 failed once (a redelivery), 3 to 5 not given yet; h: 1
   * leased. */
  ASSERT_EQ(pop(q, "g", 1, 0, &out), 1);
  size_t n = first_id(&out, id, sizeof(id));
  ASSERT_EQ(ephd_engine_ack(&e, q, g, id, n, EPHD_ACK_COMPLETED, 0),
            EPHD_OUTCOME_ACKED);
  ASSERT_EQ(pop(q, "g", 1, 0, &out), 1);
  n = first_id(&out, id, sizeof(id));
  ASSERT_EQ(ephd_engine_ack(&e, q, g, id, n, EPHD_ACK_RETRY, 0),
            EPHD_OUTCOME_REDELIVERED);
  ASSERT_EQ(pop(q, "h", 1, 0, &out), 1);
  ASSERT_EQ(ephd_transfer_write(&wire, q, r, 100), 5);
  ephd_transfer_t t;
  const char *why = NULL;
  ASSERT_EQ(ephd_transfer_parse(wire.base, wire.len, 512, &t, &why), 0);
  ASSERT_EQ(t.nmsgs, 5);
  ASSERT_EQ(t.ngroups, 2);
  ASSERT_EQ(t.msgs[0].age_ms, 100);
  /* The new owner: two messages pushed while in transit, one given to g. */
  ephd_queue_t *q2 = ephd_engine_queue_open(&e, "u", 1, "q", 1);
  push(q2, "p", 8, 2, 50);
  ephd_ring_t *r2 = ephd_queue_ring(q2, "p", 1);
  uint32_t g2 = ephd_queue_group_open(q2, "g", 1);
  out.len = 0;
  ASSERT_EQ(ephd_engine_pop(&e, q2, r2, g2, 1, 1, 100, &out, SIZE_MAX), 1);
  ephd_push_plan_t plan;
  ephd_engine_plan_accept(&e, q2->tenant, 1, q2, 1, r2, 1, t.nmsgs, t.bytes,
                          &limits, &plan);
  ASSERT_EQ(plan.refusals, 0);
  uint64_t pushed = q2->tenant->pushed;
  ephd_engine_accept(&e, q2, r2, &t, 200);
  ephd_transfer_free(&t);
  ASSERT_EQ(q2->tenant->pushed, pushed);
  ASSERT_EQ(ephd_ring_at(r2, r2->tail - 5)->enqueued_ms, 100);
  ASSERT_EQ(e.cell_bytes,
            ephd_cost_tenant(1) * 2 + q->footprint + q2->footprint);
  /* g: what it had not taken here, then its redeliveries and lease, then
   * what it had never been given; nothing twice. */
  char got[128];
  out.len = 0;
  ASSERT_EQ(ephd_engine_pop(&e, q2, r2, g2, 100, 1, 200, &out, SIZE_MAX), 5);
  payloads(&out, got, sizeof(got));
  ASSERT(strcmp(got, "9,2,3,4,5") == 0);
  ASSERT(memmem(out.base, out.len, "\"attempts\":1", 12) != NULL);
  /* h, new here: what is still here (8 went once g, the only group here
   * then, took it), then its lease as a redelivery, then the rest. */
  uint32_t h2;
  ASSERT(ephd_queue_group_find(q2, "h", 1, &h2));
  out.len = 0;
  ASSERT_EQ(ephd_engine_pop(&e, q2, r2, h2, 100, 1, 200, &out, SIZE_MAX), 6);
  payloads(&out, got, sizeof(got));
  ASSERT(strcmp(got, "9,1,2,3,4,5") == 0);
  /* A lease on its last allowed delivery (retryLimit 3) travels with
   * attempts 3: a retry drop for its group, not a fourth delivery. */
  static const char last[] =
      "ephd-transfer 1\n1 1 1 1\nqz\n0 1\n7\n"
      "1 1 1\ng\n0 3\n";
  ASSERT_EQ(ephd_transfer_parse(last, sizeof(last) - 1, 512, &t, &why), 0);
  ephd_queue_t *qz = ephd_engine_queue_open(&e, "u", 1, "q", 1);
  ephd_ring_t *rz = ephd_queue_ring_open(qz, "z", 1);
  ephd_engine_plan_accept(&e, qz->tenant, 1, qz, 1, rz, 1, 1, 1, &limits,
                          &plan);
  uint64_t drops = qz->drops_retry;
  ephd_engine_accept(&e, qz, rz, &t, 300);
  ephd_transfer_free(&t);
  ASSERT_EQ(qz->drops_retry, drops + 1);
  uint32_t gz;
  ASSERT(ephd_queue_group_find(qz, "g", 1, &gz));
  out.len = 0;
  ASSERT_EQ(ephd_engine_pop(&e, qz, rz, gz, 10, 1, 300, &out, SIZE_MAX), 0);
  /* A redelivery of a message past the list, a group past it: refused. */
  static const char past[] =
      "ephd-transfer 1\n1 1 1 1\nqp\n0 1\n1\n"
      "1 0 1\ng\n1 0\n";
  ASSERT_EQ(ephd_transfer_parse(past, sizeof(past) - 1, 512, &t, &why), -1);
  static const char beyond[] =
      "ephd-transfer 1\n1 1 1 1\nqp\n0 1\n1\n"
      "1 2 0\ng\n";
  ASSERT_EQ(ephd_transfer_parse(beyond, sizeof(beyond) - 1, 512, &t, &why), -1);
  static const char fine[] =
      "ephd-transfer 1\n1 1 1 1\nqp\n0 1\n1\n"
      "1 1 1\ng\n0 0\n";
  ASSERT_EQ(ephd_transfer_parse(fine, sizeof(fine) - 1, 512, &t, &why), 0);
  ephd_transfer_free(&t);
  /* Truncated or padded, it is refused. */
  ASSERT_EQ(ephd_transfer_parse(wire.base, wire.len - 1, 512, &t, &why), -1);
  ephd_buf_append(&wire, "x", 1);
  ASSERT_EQ(ephd_transfer_parse(wire.base, wire.len, 512, &t, &why), -1);
  ephd_buf_free(&wire);
  ephd_buf_free(&out);
  return stop();
}

/* A partition adopted from another broker is never refused nor evicted
 * by the queue's bounds: its messages were admitted under the old owner's
 * share; the next push meets the bound. */
TEST_IMPL(engine_accept_is_not_bounded) {
  start(1000, 2, 1, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_buf_t wire;
  ephd_buf_init(&wire);
  push(q, "p", 1, 2, 0);
  ASSERT_EQ(ephd_transfer_write(&wire, q, ephd_queue_ring(q, "p", 1), 0), 2);
  ephd_transfer_t t;
  const char *why = NULL;
  ASSERT_EQ(ephd_transfer_parse(wire.base, wire.len, 512, &t, &why), 0);
  ephd_queue_t *q2 = ephd_engine_queue_open(&e, "u", 1, "q", 1);
  push(q2, "other", 5, 2, 0); /* q2 is at its maxLength */
  ephd_ring_t *r2 = ephd_queue_ring_open(q2, "p", 1);
  ephd_push_plan_t plan;
  ephd_engine_plan_accept(&e, q2->tenant, 1, q2, 1, r2, 1, t.nmsgs, t.bytes,
                          &limits, &plan);
  ASSERT_EQ(plan.refusals, 0);
  ASSERT_EQ(plan.evict, 0);
  ephd_engine_accept(&e, q2, r2, &t, 0);
  ephd_transfer_free(&t);
  ASSERT_EQ(q2->depth, 4);
  ASSERT_EQ(q2->drops_bounds, 0);
  ASSERT_EQ(push(q2, "x", 9, 1, 0), EPHD_REFUSE_QUEUE_CROWDED);
  ephd_buf_free(&wire);
  return stop();
}

/* The depth read's pending is Queen's backlog: from the cursor to the
 * tail plus redeliveries, leased messages not in it; with no group named,
 * each partition's worst named group, and queue mode listed by its name. */
TEST_IMPL(engine_depth_is_the_backlog) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_buf_t out;
  ephd_buf_init(&out);
  push(q, "p", 1, 3, 0);
  ASSERT_EQ(pop(q, "g", 1, 0, &out), 1); /* leased: not pending */
  ephd_queue_group_open(q, "h", 1);      /* nothing taken */
  ephd_partition_info_t part;
  uint32_t pos = 0, g;
  ASSERT(ephd_queue_group_find(q, "g", 1, &g));
  ASSERT(ephd_queue_next_partition(q, &pos, g, &part));
  ASSERT_EQ(part.pending, 2);
  pos = 0;
  ASSERT(ephd_queue_next_partition(q, &pos, EPHD_DEPTH_WORST, &part));
  ASSERT_EQ(part.pending, 3); /* h's */
  pos = 0;
  ASSERT(ephd_queue_next_partition(q, &pos, EPHD_DEPTH_NEW, &part));
  ASSERT_EQ(part.pending, 3);
  /* Naming queue mode reaches the shared cursor, listed by its name. */
  uint32_t shared = ephd_queue_group_open(q, "", 0);
  ASSERT_EQ(ephd_queue_group_open(q, EPHD_QUEUE_MODE, 14), shared);
  ASSERT_EQ(pop(q, EPHD_QUEUE_MODE, 3, 0, &out), 3);
  ephd_group_info_t grp;
  pos = 0;
  int seen = 0;
  while (ephd_queue_next_group(q, &pos, &grp))
    if (grp.name_len == 14 && memcmp(grp.name, EPHD_QUEUE_MODE, 14) == 0) {
      ASSERT_EQ(grp.pending, 0);
      seen = 1;
    }
  ASSERT(seen);
  ephd_queue_info_t info;
  ephd_queue_info(q, &info);
  ASSERT_EQ(info.groups, 3);
  ephd_buf_free(&out);
  return stop();
}

TEST_IMPL(engine_reset_and_delete) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_buf_t out;
  ephd_buf_init(&out);
  push(q, "p", 1, 4, 0);
  pop(q, "g", 2, 0, &out);
  ASSERT_EQ(e.leases.len, 2);
  ASSERT_EQ(ephd_engine_reset(&e, q), 4);
  ASSERT_EQ(e.leases.len, 0);
  /* The messages and leases are no longer charged; the names are. */
  ASSERT_EQ(q->footprint, ephd_cost_queue(1) + ephd_cost_ring(1) +
                              ephd_cost_group(1) + EPHD_COST_CURSOR +
                              8 * EPHD_COST_SLOT + EPHD_ALLOC_OVERHEAD);
  ASSERT_EQ(e.cell_bytes, ephd_cost_tenant(1) + q->footprint);
  push(q, "p", 5, 1, 0);
  ASSERT_EQ(pop(q, "g", 10, 0, &out), 1); /* the cursor was rewound */
  ephd_engine_delete(&e, q);
  ASSERT(ephd_engine_queue(&e, "t", 1, "q", 1) == NULL);
  ASSERT_EQ(e.leases.len, 0);
  ASSERT_EQ(e.cell_bytes, ephd_cost_tenant(1)); /* until it is forgotten */
  ephd_buf_free(&out);
  return stop();
}

TEST_IMPL(engine_tenant_allowances) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ASSERT_EQ(push(q, "p", 1, 3, 0), 0);
  /* Room for the payload but not for what a message costs besides. */
  limits.max_bytes = q->tenant->bytes + EPHD_COST_MSG;
  ASSERT_EQ(push(q, "p", 4, 1, 0), EPHD_REFUSE_TENANT_BYTES);
  limits.max_bytes++;
  ASSERT_EQ(push(q, "p", 4, 1, 0), 0);
  /* A new queue past the tenant's queue allowance, reported with every
   * other budget it breaks. */
  limits.max_queues = 1;
  ephd_push_plan_t plan;
  ephd_engine_plan_push(&e, q->tenant, 1, NULL, 1, NULL, 1, 1, 1, &limits, NULL,
                        &plan);
  ASSERT_EQ(plan.refusals,
            EPHD_REFUSE_TENANT_QUEUES | EPHD_REFUSE_TENANT_BYTES);
  limits.max_bytes = 0;
  ephd_engine_plan_push(&e, q->tenant, 1, NULL, 1, NULL, 1, 1, 1, &limits, NULL,
                        &plan);
  ASSERT_EQ(plan.refusals, EPHD_REFUSE_TENANT_QUEUES);
  ASSERT_EQ(q->tenant->pushed, 4);
  return stop();
}

/* A push creating a queue is planned against the options it will be
 * created with (the policy's queue_options), not the broker's defaults. */
TEST_IMPL(engine_plans_a_new_queue_with_its_options) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_options_t created = e.defaults;
  created.max_length = 3;
  ephd_push_plan_t plan;
  ephd_engine_plan_push(&e, q->tenant, 1, NULL, 1, NULL, 1, 4, 4, &limits,
                        &created, &plan);
  ASSERT_EQ(plan.refusals, EPHD_REFUSE_QUEUE_TOO_SMALL);
  ephd_engine_plan_push(&e, q->tenant, 1, NULL, 1, NULL, 1, 3, 3, &limits,
                        &created, &plan);
  ASSERT_EQ(plan.refusals, 0);
  ephd_engine_plan_push(&e, q->tenant, 1, NULL, 1, NULL, 1, 4, 4, &limits, NULL,
                        &plan);
  ASSERT_EQ(plan.refusals, 0);
  return stop();
}

TEST_IMPL(engine_tenant_counts_deliveries) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_buf_t out;
  ephd_buf_init(&out);
  push(q, "p", 1, 2, 0);
  pop(q, "a", 10, 0, &out);
  pop(q, "b", 10, 0, &out);
  ASSERT_EQ(q->tenant->delivered, 4); /* a pop meters as deliveries */
  ephd_buf_free(&out);
  return stop();
}

TEST_IMPL(engine_caps_partitions_and_groups) {
  start(1000, 100, 0, 1 << 20);
  e.max_partitions = 2;
  e.max_groups = 1;
  ephd_queue_t *q = queue();
  ASSERT_EQ(push(q, "p1", 1, 1, 0), 0);
  ASSERT_EQ(push(q, "p2", 1, 1, 0), 0);
  ephd_push_plan_t plan;
  ephd_engine_plan_push(&e, q->tenant, 1, q, 1, NULL, 2, 1, 1, &limits, NULL,
                        &plan);
  ASSERT_EQ(plan.refusals, EPHD_REFUSE_QUEUE_PARTS); /* a third partition */
  ephd_engine_plan_push(&e, q->tenant, 1, q, 1, ephd_queue_ring(q, "p1", 2), 2,
                        1, 1, &limits, NULL, &plan);
  ASSERT_EQ(plan.refusals, 0); /* an existing one is fine */
  ASSERT(!ephd_queue_full_of_groups(&e, q));
  ephd_queue_group_open(q, "", 0); /* queue mode is not a named group */
  ASSERT(!ephd_queue_full_of_groups(&e, q));
  ephd_queue_group_open(q, "g", 1);
  ASSERT(ephd_queue_full_of_groups(&e, q));
  return stop();
}

/* Partitions are found by a scan while few and by a map past that: each
 * must be found, by its own name only, on both sides of the switch. */
TEST_IMPL(engine_finds_partitions_few_and_many) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  ephd_ring_t *rings[20];
  char names[20][8];
  for (int n = 0; n < 20; n++) {
    snprintf(names[n], sizeof(names[n]), "p%d", n);
    rings[n] = ephd_queue_ring_open(q, names[n], strlen(names[n]));
    ASSERT(ephd_queue_ring_open(q, names[n], strlen(names[n])) == rings[n]);
    for (int i = 0; i <= n; i++)
      ASSERT(ephd_queue_ring(q, names[i], strlen(names[i])) == rings[i]);
    ASSERT(ephd_queue_ring(q, "p", 1) == NULL);
    ASSERT(ephd_queue_ring(q, "p99", 3) == NULL);
  }
  ASSERT_EQ(q->nrings, 20);
  return stop();
}

/* Appends "tenant/queue/partition;" for each partition walked. */
static void walked(void *arg, const char *tenant, size_t tenant_len,
                   const char *queue, size_t queue_len, const char *partition,
                   size_t partition_len) {
  ephd_buf_t *b = arg;
  ephd_buf_append(b, tenant, tenant_len);
  ephd_buf_append(b, "/", 1);
  ephd_buf_append(b, queue, queue_len);
  ephd_buf_append(b, "/", 1);
  ephd_buf_append(b, partition, partition_len);
  ephd_buf_append(b, ";", 1);
}

static int walked_count(const ephd_buf_t *b) {
  int n = 0;
  for (size_t i = 0; i < b->len; i++) n += b->base[i] == ';';
  return n;
}

static int walked_through(const ephd_buf_t *b, const char *what) {
  return memmem(b->base, b->len, what, strlen(what)) != NULL;
}

/* The walk the cell's status counts partitions with: every ring of every
 * queue of every tenant, past the few that a queue keeps in its array. */
TEST_IMPL(engine_walks_every_partition) {
  start(1000, 100, 0, 1 << 20);
  ephd_buf_t b;
  ephd_buf_init(&b);
  ephd_engine_each_partition(&e, walked, &b);
  ASSERT_EQ(b.len, 0);
  ephd_queue_t *q = queue();
  char name[8];
  for (int n = 0; n < 12; n++) {
    snprintf(name, sizeof(name), "p%02d", n);
    ephd_queue_ring_open(q, name, 3);
  }
  ephd_queue_t *other = ephd_engine_queue_open(&e, "u", 1, "q2", 2);
  ephd_queue_ring_open(other, "Default", 7);
  ephd_engine_each_partition(&e, walked, &b);
  ASSERT_EQ(walked_count(&b), 13);
  ASSERT(walked_through(&b, "t/q/p00;"));
  ASSERT(walked_through(&b, "t/q/p11;"));
  ASSERT(walked_through(&b, "u/q2/Default;"));
  ephd_buf_free(&b);
  return stop();
}

/* A parked waiter of the engine tests: it re-runs its pop when woken, as the
 * daemon's waiters do, and counts what it got. */
typedef struct {
  ephd_waiter_t w;
  ephd_queue_t *q;
  uint32_t group;
  ephd_buf_t out;
  uint32_t got;
} test_waiter_t;

static int waiter_wake(ephd_waiter_t *w) {
  test_waiter_t *tw = (test_waiter_t *)w;
  if (!ephd_engine_ready(tw->q, w->ring, tw->group)) return 0;
  ephd_gate_unpark(w);
  tw->out.len = 0;
  tw->got = ephd_engine_pop(&e, tw->q, w->ring, tw->group, 1, 1, 0, &tw->out,
                            SIZE_MAX);
  return 1;
}

static void waiter_flush(ephd_waiter_t *w) { (void)w; }

/* Waiters point at their group's gate: naming new groups while they are
 * parked must not move it (the array of groups was grown by realloc, and
 * the next push woke through freed memory). */
TEST_IMPL(engine_new_groups_while_parked) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  test_waiter_t tw[3];
  uint32_t g = ephd_queue_group_open(q, "", 0);
  for (int i = 0; i < 3; i++) {
    memset(&tw[i], 0, sizeof(tw[i]));
    ephd_waiter_init(&tw[i].w, waiter_wake, waiter_flush);
    tw[i].q = q;
    tw[i].group = g;
    ephd_gate_park(ephd_queue_gate(q, g), &tw[i].w);
  }
  ASSERT_EQ(q->tenant->parked, 3);
  char name[16];
  for (int i = 0; i < 64; i++) {
    snprintf(name, sizeof(name), "g%d", i);
    ephd_queue_group_open(q, name, strlen(name));
  }
  ASSERT_EQ(push(q, "p", 1, 3, 0), 0);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(tw[i].got, 1);
    ASSERT(tw[i].w.gate == NULL);
  }
  ASSERT_EQ(q->tenant->parked, 0);
  for (int i = 0; i < 3; i++) ephd_buf_free(&tw[i].out);
  return stop();
}

/* Names cost what they hold: a group pays a cursor in every partition and
 * a partition one for every group, and a budget refuses the name that
 * would pass it before anything is created. */
TEST_IMPL(engine_charges_names) {
  start(1000, 100, 0, 1 << 20);
  ephd_queue_t *q = queue();
  uint64_t base = q->footprint;
  ASSERT_EQ(base, ephd_cost_queue(1));
  char name[16];
  for (int i = 0; i < 10; i++) {
    snprintf(name, sizeof(name), "p%d", i);
    ephd_queue_ring_open(q, name, strlen(name));
  }
  for (int i = 0; i < 4; i++) {
    snprintf(name, sizeof(name), "group%d", i);
    ephd_queue_group_open(q, name, strlen(name));
  }
  ASSERT_EQ(q->footprint, base + 10 * ephd_cost_ring(2) +
                              4 * ephd_cost_group(6) + 40 * EPHD_COST_CURSOR);
  ASSERT_EQ(q->tenant->bytes, q->footprint);
  ASSERT_EQ(e.cell_bytes, ephd_cost_tenant(1) + q->footprint);
  /* A fifth group would add a cursor to each of the ten partitions. */
  uint64_t group = ephd_cost_group(6) + 10 * EPHD_COST_CURSOR;
  limits.max_bytes = q->tenant->bytes + group - 1;
  ASSERT_EQ(ephd_engine_plan_names(&e, q->tenant, 1, q, 1, 0, 0, 1, 6, &limits),
            EPHD_REFUSE_TENANT_BYTES);
  limits.max_bytes++;
  ASSERT_EQ(ephd_engine_plan_names(&e, q->tenant, 1, q, 1, 0, 0, 1, 6, &limits),
            0);
  /* A new partition and a new group together: the new ring gets the four
   * groups' cursors and the group eleven. */
  uint64_t both =
      ephd_cost_ring(3) + ephd_cost_group(6) + (4 + 11) * EPHD_COST_CURSOR;
  e.max_cell_bytes = e.cell_bytes + both - 1;
  limits.max_bytes = 0;
  ASSERT_EQ(ephd_engine_plan_names(&e, q->tenant, 1, q, 1, 1, 3, 1, 6, &limits),
            EPHD_REFUSE_CELL_BYTES);
  e.max_cell_bytes++;
  ASSERT_EQ(ephd_engine_plan_names(&e, q->tenant, 1, q, 1, 1, 3, 1, 6, &limits),
            0);
  /* Naming nothing new is never refused, whatever the footprint. */
  e.max_cell_bytes = 0;
  ASSERT_EQ(ephd_engine_plan_names(&e, q->tenant, 1, q, 1, 0, 0, 0, 0, &limits),
            0);
  /* A new tenant's record is the cell's. */
  ASSERT_EQ(ephd_engine_plan_names(&e, NULL, 2, NULL, 1, 0, 0, 0, 0, &limits),
            EPHD_REFUSE_CELL_BYTES);
  return stop();
}

/* The heap a cursor's lease map and redelivery FIFO take, at capacity. */
static uint64_t tables_heap(const ephd_cursor_t *c) {
  uint64_t map = c->leases.slots ? (c->leases.mask + 1) * 32 + 24 : 0;
  uint64_t redo = c->redo_cap ? c->redo_cap * 16 + 24 : 0;
  return map + redo;
}

/* One queue, one ring, one group: what it holds, from its structures. */
static uint64_t held(const ephd_queue_t *q) {
  const ephd_ring_t *r = q->rings[0];
  const ephd_cursor_t *c = &r->cursors[0];
  return ephd_cost_queue(q->name_len) + ephd_cost_ring(r->name_len) +
         ephd_cost_group(q->groups[0]->len) + EPHD_COST_CURSOR +
         ephd_cost_messages(r) + c->leases.count * EPHD_COST_LEASE +
         tables_heap(c);
}

/* Acks every delivery in a pop body but the last `keep`. */
static uint32_t ack_all_but(ephd_queue_t *q, uint32_t g, const ephd_buf_t *b,
                            uint32_t n, uint32_t keep) {
  const char *p = b->base, *end = b->base + b->len;
  uint32_t acked = 0;
  for (uint32_t i = 0; i + keep < n; i++) {
    p = memmem(p, (size_t)(end - p), "\"id\":\"", 6) + 6;
    const char *q_end = memchr(p, '"', (size_t)(end - p));
    if (ephd_engine_ack(&e, q, g, p, (size_t)(q_end - p), EPHD_ACK_COMPLETED,
                        0) == EPHD_OUTCOME_ACKED)
      acked++;
    p = q_end;
  }
  return acked;
}

/* A million one-byte messages were counted as a megabyte: each pays its
 * header and allocation too, and its leases while they live. */
TEST_IMPL(engine_charges_messages_and_leases) {
  start(1 << 20, 1 << 20, 0, 1u << 31);
  ephd_queue_t *q = queue();
  ephd_buf_t out;
  ephd_buf_init(&out);
  pop(q, "g", 1, 0, &out);
  for (int i = 0; i < 1000; i += 10) ASSERT_EQ(push(q, "p", 0, 10, 0), 0);
  ASSERT_EQ(q->bytes, 1000);
  ephd_ring_t *r = ephd_queue_ring(q, "p", 1);
  uint64_t messages = 1000 * (1 + EPHD_COST_MSG) + r->cap * EPHD_COST_SLOT +
                      EPHD_ALLOC_OVERHEAD;
  uint64_t names = ephd_cost_queue(1) + ephd_cost_ring(1) + ephd_cost_group(1) +
                   EPHD_COST_CURSOR;
  ASSERT_EQ(q->footprint, names + messages);
  ASSERT_EQ(pop(q, "g", 10, 0, &out), 10);
  const ephd_cursor_t *c = &r->cursors[0];
  ASSERT_EQ(q->footprint,
            names + messages + 10 * EPHD_COST_LEASE + tables_heap(c));
  ephd_leases_expire(&e.leases, 60 * 1000); /* back for redelivery */
  ASSERT_EQ(q->footprint, names + messages + tables_heap(c));
  ASSERT_EQ(e.cell_bytes, ephd_cost_tenant(1) + q->footprint);
  ephd_buf_free(&out);
  return stop();
}

/* A cursor kept the lease map of its busiest moment for one lease left,
 * and the redelivery FIFO of its worst expiry, and neither was charged:
 * 64 groups each holding one lease after a pop of 10,000 held 32 MiB the
 * budgets never saw. Both shrink as they drain, and what they take is
 * charged at every step. */
TEST_IMPL(engine_charges_cursor_tables) {
  start(1 << 20, 1 << 20, 0, 1u << 31);
  ephd_queue_t *q = queue();
  ephd_buf_t out;
  ephd_buf_init(&out);
  pop(q, "g", 1, 0, &out);
  uint32_t g = ephd_queue_group_open(q, "g", 1);
  for (int i = 0; i < 1000; i += 10) ASSERT_EQ(push(q, "p", i, 10, 0), 0);
  ephd_cursor_t *c = &q->rings[0]->cursors[0];
  ASSERT_EQ(pop(q, "g", 1000, 0, &out), 1000);
  ASSERT_EQ(c->leases.mask + 1, 2048);
  ASSERT_EQ(q->footprint, held(q));
  ASSERT_EQ(ack_all_but(q, g, &out, 1000, 1), 999);
  ASSERT_EQ(c->leases.count, 1);
  ASSERT_EQ(c->leases.mask + 1, 8); /* not the 2048 of its busiest moment */
  ASSERT_EQ(q->footprint, held(q));
  ASSERT_EQ(ack_all_but(q, g, &out, 1000, 0), 1);
  ASSERT(c->leases.slots == NULL);
  ASSERT_EQ(q->footprint, held(q));
  /* A thousand expiries fill the redelivery FIFO; it drains back. */
  for (int i = 0; i < 1000; i += 10) ASSERT_EQ(push(q, "p", i, 10, 0), 0);
  ASSERT_EQ(pop(q, "g", 1000, 0, &out), 1000);
  ephd_leases_expire(&e.leases, 30 * 1000);
  ASSERT_EQ(c->redo_len, 1000);
  ASSERT_EQ(q->footprint, held(q));
  ASSERT_EQ(pop(q, "g", 999, 30000, &out), 999);
  ASSERT(c->redo_cap <= 8);
  ASSERT_EQ(q->footprint, held(q));
  ASSERT_EQ(pop(q, "g", 1, 30000, &out), 1);
  ASSERT_EQ(c->redo_cap, 0);
  ASSERT_EQ(q->footprint, held(q));
  ephd_engine_reset(&e, q);
  ASSERT_EQ(q->footprint, held(q));
  ASSERT_EQ(e.cell_bytes, ephd_cost_tenant(1) + q->footprint);
  ephd_buf_free(&out);
  return stop();
}

/* Tenant records were kept forever, one per tenant id ever seen: a tenant
 * whose last queue went is forgotten after forget_ms, unless it opens a
 * queue again first. */
TEST_IMPL(engine_forgets_empty_tenants) {
  start(1000, 100, 0, 1 << 20);
  e.forget_ms = 1000;
  uint64_t t0 = uv_now(&loop);
  ephd_queue_t *a = ephd_engine_queue_open(&e, "a", 1, "q", 1);
  ephd_queue_t *b = ephd_engine_queue_open(&e, "b", 1, "q", 1);
  uint64_t born = b->tenant->born;
  ASSERT_EQ(push(a, "p", 1, 1, t0), 0);
  ASSERT_EQ(a->tenant->pushed, 1);
  ephd_engine_delete(&e, a);
  ephd_engine_delete(&e, b);
  ASSERT_EQ(e.tenants.count, 2); /* the meter still sees their counts */
  ASSERT_EQ(ephd_engine_tenant(&e, "a", 1)->pushed, 1);
  ephd_engine_queue_open(&e, "b", 1, "q2", 2); /* b is back in time */
  ephd_engine_housekeep(&e, t0 + 999);
  ASSERT_EQ(e.tenants.count, 2);
  ephd_engine_housekeep(&e, t0 + 1000);
  ASSERT_EQ(e.tenants.count, 1);
  ASSERT(ephd_engine_tenant(&e, "a", 1) == NULL);
  ASSERT_EQ(ephd_engine_tenant(&e, "b", 1)->born, born);
  ASSERT_EQ(e.cell_bytes, ephd_cost_tenant(1) + ephd_cost_queue(2));
  /* Seen again, a is a new record: counters from zero, a new born. */
  ephd_queue_t *again = ephd_engine_queue_open(&e, "a", 1, "q", 1);
  ASSERT_EQ(again->tenant->pushed, 0);
  ASSERT(again->tenant->born > born);
  return stop();
}

/* Configures of new queues were checked before their writes and applied
 * after, so any number in flight passed an allowance with room for one:
 * what each will create is reserved from its check to its completion. */
TEST_IMPL(engine_reserves_configures_in_flight) {
  start(1000, 100, 0, 1 << 20);
  e.forget_ms = 1000;
  uint64_t t0 = uv_now(&loop);
  limits.max_queues = 2;
  ASSERT_EQ(ephd_engine_plan_queue(&e, NULL, 1, 2, &limits), 0);
  ephd_engine_reserve_queue(&e, "t", 1, 2);
  ephd_tenant_t *t = ephd_engine_tenant(&e, "t", 1);
  ASSERT_EQ(ephd_engine_plan_queue(&e, t, 1, 2, &limits), 0);
  ephd_engine_reserve_queue(&e, "t", 1, 2);
  ASSERT_EQ(t->queues.count, 0);
  ASSERT_EQ(t->bytes, 2 * ephd_cost_queue(2));
  ASSERT_EQ(e.cell_bytes, ephd_cost_tenant(1) + t->bytes);
  /* Two in flight fill the allowance for configures, pushes and pops. */
  ASSERT_EQ(ephd_engine_plan_queue(&e, t, 1, 2, &limits),
            EPHD_REFUSE_TENANT_QUEUES);
  ephd_push_plan_t plan;
  ephd_engine_plan_push(&e, t, 1, NULL, 2, NULL, 1, 1, 1, &limits, NULL, &plan);
  ASSERT_EQ(plan.refusals, EPHD_REFUSE_TENANT_QUEUES);
  ASSERT(ephd_tenant_full_of_queues(t, &limits));
  /* ...and their bytes count in the byte budgets. */
  limits.max_queues = 0;
  limits.max_bytes = 2 * ephd_cost_queue(2) + ephd_cost_queue(2) - 1;
  ASSERT_EQ(ephd_engine_plan_queue(&e, t, 1, 2, &limits),
            EPHD_REFUSE_TENANT_BYTES);
  limits.max_bytes = 0;
  /* A tenant holding only reservations is not forgotten. */
  ephd_engine_housekeep(&e, t0 + 5000);
  ASSERT(ephd_engine_tenant(&e, "t", 1) == t);
  /* One write succeeds (released, then declared), one fails. */
  ephd_engine_release_queue(&e, "t", 1, 2);
  ephd_options_t o = e.defaults;
  ephd_engine_declare(&e, "t", 1, "q1", 2, &o, 1);
  ephd_engine_release_queue(&e, "t", 1, 2);
  ASSERT_EQ(t->reserved_queues, 0);
  ASSERT_EQ(t->queues.count, 1);
  ASSERT_EQ(t->bytes, ephd_cost_queue(2));
  ASSERT_EQ(e.cell_bytes, ephd_cost_tenant(1) + t->bytes);
  return stop();
}
