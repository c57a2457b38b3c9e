/* Ownership moves: see handover.h. */
#include "handover.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffi.h"
#include "http.h"
#include "list.h"
#include "log.h"
#include "mark.h"
#include "op.h"
#include "prom.h"
#include "relay.h"
#include "transfer.h"

/* Hand-overs in flight at once: enough to keep a few peers busy, few
 * enough that a move does not fill the relay's queues ahead of relayed
 * client requests. */
#define WINDOW 4

static const char TARGET[] = "/api/v1/ephemeral/handover";

static uv_loop_t *loop;
static ephd_engine_t *engine;
static const char *token;
static ephd_handover_limits_t limits;

/* Messages dropped because their partition moved away without being
 * handed over (unplanned), or could not be (handover); and handed over. */
static uint64_t wiped_unplanned, wiped_handover, handed_over;

/* One partition on its way to its new owner, written out already. */
typedef struct job {
  ephd_node_t link; /* in queued */
  uint64_t messages;
  char address[EPHD_MEMBER_ADDRESS_MAX];
  ephd_buf_t headers; /* the forward mark and the media type */
  ephd_buf_t body;
} job_t;

/* The move under way: its jobs not yet sent, how many are in flight, when
 * it must be over, and its tally for the log line. Moves that overlap
 * (views changing in a row) share it. */
static ephd_list_t queued;
static uint32_t in_flight;
static uv_timer_t deadline_timer;
static int timer_ready, leaving;
static uint64_t deadline_ms;
static uint64_t tally_partitions, tally_handed, tally_dropped;
static void (*on_done)(void);

void ephd_handover_init(uv_loop_t *l, ephd_engine_t *e, const char *cell_token,
                        const ephd_handover_limits_t *lim) {
  loop = l;
  engine = e;
  token = cell_token;
  limits = *lim;
}

static void log_count(const char *event, const char *level, uint64_t partitions,
                      uint64_t messages, uint64_t bytes, const char *msg) {
  char np[24], nm[24], nb[24];
  snprintf(np, sizeof(np), "%" PRIu64, partitions);
  snprintf(nm, sizeof(nm), "%" PRIu64, messages);
  snprintf(nb, sizeof(nb), "%" PRIu64, bytes);
  ephd_log(level, event, "partitions", np, "messages", nm, "bytes", nb, "msg",
           msg, NULL);
}

static void job_free(job_t *j) {
  ephd_buf_free(&j->headers);
  ephd_buf_free(&j->body);
  free(j);
}

/* The move is over when nothing is queued or in flight: one line for it,
 * and a leaving broker goes on with its stop. */
static void settle(void) {
  if (queued.head || in_flight) return;
  if (timer_ready) uv_timer_stop(&deadline_timer);
  if (tally_partitions) {
    char np[24], nh[24], nd[24];
    snprintf(np, sizeof(np), "%" PRIu64, tally_partitions);
    snprintf(nh, sizeof(nh), "%" PRIu64, tally_handed);
    snprintf(nd, sizeof(nd), "%" PRIu64, tally_dropped);
    ephd_log(tally_dropped ? "warn" : "info", "partitions_handed_over",
             "partitions", np, "messages", nh, "dropped", nd, NULL);
  }
  tally_partitions = tally_handed = tally_dropped = 0;
  void (*done)(void) = on_done;
  on_done = NULL;
  if (done) done();
}

static void dropped(uint64_t messages) {
  wiped_handover += messages;
  tally_dropped += messages;
}

static void pump(void);

static void on_answer(void *data, int result,
                      const ephd_relay_response_t *res) {
  job_t *j = data;
  in_flight--;
  if (result == EPHD_RELAY_OK && res->status == 200) {
    handed_over += j->messages;
    tally_handed += j->messages;
  } else {
    char status[16];
    snprintf(status, sizeof(status), "%d", res ? res->status : 0);
    ephd_log("warn", "handover_failed", "peer", j->address, "reason",
             result == EPHD_RELAY_OK ? "refused" : ephd_relay_kind_name(result),
             "status", status, NULL);
    dropped(j->messages);
  }
  job_free(j);
  pump();
  settle();
}

static job_t *first_queued(void) {
  job_t *j = EPHD_ENTRY(queued.head, job_t, link);
  ephd_list_remove(&queued, &j->link);
  return j;
}

/* Sends what the window allows, while the move's time lasts. */
static void pump(void) {
  uint64_t now = uv_now(loop);
  while (queued.head && in_flight < WINDOW) {
    job_t *j = first_queued();
    ephd_relay_peer_t *peer = ephd_relay_peer(j->address);
    ephd_relay_request_t rq = {
        .method = {"POST", 4},
        .target = {TARGET, sizeof(TARGET) - 1},
        .headers = {j->headers.base, j->headers.len},
        .body = {j->body.base, j->body.len},
        .timeout_ms = deadline_ms > now ? deadline_ms - now : 1,
    };
    ephd_relay_t *sent;
    if (now >= deadline_ms || peer == NULL ||
        ephd_relay_send(peer, &rq, on_answer, j, &sent) != 0) {
      dropped(j->messages);
      job_free(j);
      continue;
    }
    /* The relay copied the request: what the answer needs is the rest. */
    ephd_buf_free(&j->headers);
    ephd_buf_free(&j->body);
    in_flight++;
  }
}

/* Past the move's time: what was not sent is dropped; what is in flight
 * ends by its own deadline, the same moment. */
static void on_deadline(uv_timer_t *t) {
  (void)t;
  while (queued.head) {
    job_t *j = first_queued();
    dropped(j->messages);
    job_free(j);
  }
  settle();
}

/* A move's hand-overs are answered within the timeout from when it
 * starts; one that starts while another is under way gives both that long
 * (what is in flight keeps its own deadline). */
static void start_clock(void) {
  if (!timer_ready) {
    uv_timer_init(loop, &deadline_timer);
    timer_ready = 1;
  }
  deadline_ms = uv_now(loop) + limits.timeout_ms;
  uv_timer_start(&deadline_timer, on_deadline, limits.timeout_ms, 0);
}

/* --- finding what moves ---------------------------------------------- */

/* The partitions a view change moves away, found by one walk and acted on
 * after it (the walk must not change the engine): each is its three names,
 * length-prefixed, in one buffer, then its new owner's index. */
typedef struct {
  const ephd_view_t *view;
  const ephd_view_t *before; /* NULL: nothing is planned (a stop is) */
  const ephd_member_t *was;
  uint32_t nwas;
  int stopping;
  ephd_buf_t moving;
  uint32_t count;
} walk_t;

static void append_name(ephd_buf_t *b, const char *s, size_t len) {
  ephd_buf_append(b, (const char *)&len, sizeof(len));
  ephd_buf_append(b, s, len);
}

static const char *take_name(const char **p, size_t *len) {
  memcpy(len, *p, sizeof(*len));
  const char *s = *p + sizeof(*len);
  *p = s + *len;
  return s;
}

static int member_of(const ephd_member_t *list, uint32_t n, uint64_t id) {
  for (uint32_t i = 0; i < n; i++)
    if (list[i].id == id) return 1;
  return 0;
}

static void find_moving(void *arg, const char *tenant, size_t tenant_len,
                        const char *queue, size_t queue_len,
                        const char *partition, size_t partition_len) {
  walk_t *w = arg;
  const ephd_member_t *owner = ephd_placement_owner(
      w->view, tenant, tenant_len, queue, queue_len, partition, partition_len);
  if (owner == &w->view->members[w->view->self]) return;
  /* Handed over when this broker stops, or when it owned the partition
   * and the member that takes it has just joined. */
  int planned = w->stopping;
  if (!planned && w->before && !member_of(w->was, w->nwas, owner->id)) {
    const ephd_member_t *had =
        ephd_placement_owner(w->before, tenant, tenant_len, queue, queue_len,
                             partition, partition_len);
    planned = had == &w->before->members[w->before->self];
  }
  append_name(&w->moving, tenant, tenant_len);
  append_name(&w->moving, queue, queue_len);
  append_name(&w->moving, partition, partition_len);
  uint32_t index = planned ? (uint32_t)(owner - w->view->members) : UINT32_MAX;
  ephd_buf_append(&w->moving, (const char *)&index, sizeof(index));
  w->count++;
}

/* Writes the partition out for its new owner and queues it; 0, or -1 when
 * it cannot go within the move's bytes. */
static int hand_over(const ephd_member_t *owner, const char *tenant,
                     size_t tenant_len, ephd_queue_t *q, ephd_ring_t *r,
                     uint64_t *budget, uint64_t *messages) {
  job_t *j = calloc(1, sizeof(*j));
  if (j == NULL) return -1;
  ephd_buf_init(&j->headers);
  ephd_buf_init(&j->body);
  *messages = j->messages =
      ephd_transfer_write(&j->body, q, r, ephd_ffi_now_ms());
  if (j->body.len > *budget || j->body.len > limits.max_body_bytes) {
    job_free(j);
    return -1;
  }
  *budget -= j->body.len;
  snprintf(j->address, sizeof(j->address), "%s", owner->address);
  char *mark = ephd_buf_reserve(&j->headers, ephd_mark_size(tenant_len));
  j->headers.len =
      (size_t)(ephd_mark_write(
                   mark, tenant, tenant_len, (ephd_slice_t){"POST", 4},
                   (ephd_slice_t){TARGET, sizeof(TARGET) - 1}, j->body.len) -
               j->headers.base);
  ephd_buf_appends(&j->headers,
                   "Content-Type: " EPHD_TRANSFER_MEDIA_TYPE "\r\n");
  ephd_list_append(&queued, &j->link);
  return 0;
}

static void move_out(walk_t *w) {
  if (w->count == 0) return;
  start_clock();
  uint64_t budget = limits.max_bytes;
  uint64_t wiped = 0, wiped_bytes = 0, wiped_parts = 0;
  const char *p = w->moving.base;
  for (uint32_t i = 0; i < w->count; i++) {
    size_t tl, ql, pl;
    const char *t = take_name(&p, &tl);
    const char *qn = take_name(&p, &ql);
    const char *part = take_name(&p, &pl);
    uint32_t index;
    memcpy(&index, p, sizeof(index));
    p += sizeof(index);
    ephd_queue_t *q = ephd_engine_queue(engine, t, tl, qn, ql);
    ephd_ring_t *r = q ? ephd_queue_ring(q, part, pl) : NULL;
    if (r == NULL) continue;
    uint64_t messages = 0;
    int handed = index != UINT32_MAX && ephd_ring_depth(r) > 0 &&
                 hand_over(&w->view->members[index], t, tl, q, r, &budget,
                           &messages) == 0;
    uint64_t bytes, m = ephd_engine_wipe(engine, q, r, &bytes);
    if (index != UINT32_MAX) {
      tally_partitions++;
      if (!handed) dropped(m);
    } else if (m) {
      wiped += m;
      wiped_bytes += bytes;
      wiped_parts++;
    }
  }
  if (wiped_parts) {
    wiped_unplanned += wiped;
    log_count("partitions_wiped", "warn", wiped_parts, wiped, wiped_bytes,
              "moved without a hand-over: their new owner starts them empty "
              "(the loss contract)");
  }
  pump();
  settle();
}

void ephd_handover_view_changed(const ephd_member_t *was, uint32_t nwas,
                                const ephd_view_t *view) {
  /* Removing members never moves a survivor's partitions away from it:
   * only members joining can. Every partition held is walked all the
   * same, so a copy left over from an earlier disagreement of views goes
   * too. */
  if (token == NULL || leaving || view->count < 2) return;
  const ephd_member_t *self = &view->members[view->self];
  ephd_view_t before = {was, nwas, 0};
  while (before.self < nwas && was[before.self].id != self->id) before.self++;
  walk_t w = {.view = view,
              .before = before.self < nwas ? &before : NULL,
              .was = was,
              .nwas = nwas};
  ephd_buf_init(&w.moving);
  ephd_engine_each_partition(engine, find_moving, &w);
  move_out(&w);
  ephd_buf_free(&w.moving);
}

void ephd_handover_leave(const ephd_view_t *view, void (*done)(void)) {
  leaving = 1;
  on_done = done;
  if (token == NULL || view->count < 2) {
    settle();
    return;
  }
  /* The cell as it will be without this broker. Its self is one past the
   * members, an entry no owner can be. */
  ephd_member_t *others = calloc(view->count, sizeof(*others));
  if (others == NULL) abort();
  uint32_t n = 0;
  for (uint32_t i = 0; i < view->count; i++)
    if (i != view->self) others[n++] = view->members[i];
  ephd_view_t after = {others, n, n};
  walk_t w = {.view = &after, .stopping = 1};
  ephd_buf_init(&w.moving);
  ephd_engine_each_partition(engine, find_moving, &w);
  move_out(&w);
  ephd_buf_free(&w.moving);
  free(others);
  settle();
}

/* --- the new owner's half -------------------------------------------- */

static int parse(const ephd_request_t *req, ephd_transfer_t *t) {
  const char *why;
  if (ephd_transfer_parse(req->body.ptr, req->body.len,
                          ephd_ffi_config()->max_name_bytes, t, &why) == 0)
    return EPHD_OK;
  ephd_op_state_t *op = ephd_op_of(req);
  snprintf(op->pub.scan.message, sizeof(op->pub.scan.message), "%s", why);
  return EPHD_E_BAD_REQUEST;
}

int ephd_ffi_transfer_check(const ephd_request_t *req) {
  ephd_transfer_t t;
  int rc = parse(req, &t);
  if (rc == EPHD_OK) ephd_transfer_free(&t);
  return rc;
}

/* Read again rather than kept from the check: a hand-over is rare, and
 * the operation then holds nothing of its own kind. */
int ephd_ffi_transfer_commit(const ephd_request_t *req, const char *tenant,
                             size_t tenant_len,
                             const ephd_tenant_limits_t *lim) {
  ephd_op_state_t *op = ephd_op_of(req);
  op->pub.refusals = 0;
  ephd_transfer_t t;
  if (parse(req, &t) != EPHD_OK) return EPHD_E_BAD_REQUEST;
  const char *queue = t.base + t.queue_off;
  const char *partition = t.base + t.partition_off;
  uint64_t now = ephd_ffi_now_ms();
  ephd_engine_t *e = engine;
  ephd_tenant_t *tn = ephd_engine_tenant(e, tenant, tenant_len);
  ephd_queue_t *q = tn ? ephd_tenant_queue(tn, queue, t.queue_len) : NULL;
  if (q) ephd_engine_expire(e, q, now);
  ephd_ring_t *r = q ? ephd_queue_ring(q, partition, t.partition_len) : NULL;
  ephd_push_plan_t plan;
  ephd_engine_plan_accept(e, tn, tenant_len, q, t.queue_len, r, t.partition_len,
                          t.nmsgs, t.bytes, lim, &plan);
  op->pub.refusals = plan.refusals;
  if (plan.refusals) {
    ephd_transfer_free(&t);
    return EPHD_E_REFUSED;
  }
  if (q == NULL)
    q = ephd_engine_queue_open(e, tenant, tenant_len, queue, t.queue_len);
  if (r == NULL) r = ephd_queue_ring_open(q, partition, t.partition_len);
  ephd_engine_accept(e, q, r, &t, now);
  ephd_engine_touch(e, q, now);
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"accepted\":");
  ephd_buf_append_u64(out, t.nmsgs);
  ephd_buf_append(out, "}", 1);
  ephd_http_end(c);
  ephd_transfer_free(&t);
  return EPHD_OK;
}

void ephd_handover_metrics(ephd_buf_t *o) {
  const char *wipes = "queen_ephemeral_wipes_total";
  ephd_prom_family(o, wipes, "counter",
                   "Messages dropped because their partition moved to another "
                   "broker: without a hand-over (unplanned), or past what a "
                   "hand-over could carry (handover).");
  ephd_prom_sample(o, wipes, "{reason=\"unplanned\"}", wiped_unplanned);
  ephd_prom_sample(o, wipes, "{reason=\"handover\"}", wiped_handover);
  const char *handed = "queen_ephemeral_handed_over_total";
  ephd_prom_family(o, handed, "counter",
                   "Messages handed over to a partition's new owner and "
                   "accepted there.");
  ephd_prom_sample(o, handed, "", handed_over);
}
