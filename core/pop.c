/* pop, and its long poll: take a batch now, or park on the group's gate
 * until a push wakes it, its timeout passes or its client leaves. */
#include <stddef.h>

#include "clock.h"
#include "commands.h"
#include "http.h"
#include "json.h"
#include "op.h"

/* The answer, its batch taken straight into the connection's output (none
 * when take is 0: a timeout or a stop with nothing gathered). The batch is
 * nearly all of a pop's bytes: gathered in a buffer of its own first, it
 * was regrown and copied once more for every pop. */
static ephd_buf_t *begin_answer(ephd_conn_t *c, const char *queue, size_t len) {
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"queue\":");
  ephd_json_write_string(out, queue, len);
  ephd_buf_appends(out, ",\"messages\":[");
  return out;
}

static void answer_pop(ephd_conn_t *c, ephd_queue_t *q, ephd_ring_t *r,
                       uint32_t group, uint32_t batch, size_t batch_bytes,
                       int auto_ack, int take) {
  size_t len;
  const char *name = ephd_queue_name(q, &len);
  ephd_buf_t *out = begin_answer(c, name, len);
  if (take) {
    ephd_engine_t *e = ephd_commands_engine;
    uint64_t now = ephd_ffi_now_ms();
    ephd_engine_touch(e, q, now);
    ephd_engine_pop(e, q, r, group, batch, auto_ack, now, out, batch_bytes);
  }
  ephd_buf_appends(out, "]}");
  ephd_http_end(c);
}

/* A notify pop's answer when its group has something to take here: no
 * batch, and "ready", for the member that asked to take it (whole_pop.h).
 * Nothing is taken, so nothing is lost if nobody does. */
static void answer_ready(ephd_conn_t *c, ephd_queue_t *q) {
  size_t len;
  const char *name = ephd_queue_name(q, &len);
  ephd_buf_appends(begin_answer(c, name, len), "],\"ready\":true}");
  ephd_http_end(c);
}

/* --- the long poll -------------------------------------------------------
 * A pop that finds nothing parks: its operation joins the group's gate and
 * its request is held (http.h) with the pop's timeout as its deadline. It
 * is answered by a wake that finds its batch, by the deadline, by the
 * queue's deletion, or at the broker's stop; a client that leaves first
 * takes it off the gate. */

static ephd_op_state_t *parked_op(ephd_waiter_t *w) {
  return (ephd_op_state_t *)((char *)w -
                             offsetof(ephd_op_state_t, parked.waiter));
}

/* With a batch taken now (take), or an empty one. The answer ends the
 * request and gives its operation back: nothing touches op after it. */
static void answer_parked(ephd_op_state_t *op, int take) {
  answer_pop(ephd_deferred_conn(op->parked.deferred), op->parked.queue,
             op->parked.waiter.ring, op->parked.group, op->parked.batch,
             op->parked.batch_bytes, op->parked.auto_ack, take);
}

static int on_wake(ephd_waiter_t *w) {
  ephd_op_state_t *op = parked_op(w);
  ephd_queue_t *q = op->parked.queue;
  uint32_t g = op->parked.group, batch = op->parked.batch;
  /* Expired first, as the take will be: a lease that expires on a message
   * past its TTL wakes the gate for a redelivery the take then drops, and
   * a pop answered empty before its timeout is one its client retries. */
  if (!ephd_engine_would_deliver(ephd_commands_engine, q, w->ring, 0, 0, g,
                                 ephd_ffi_now_ms()))
    return 0;
  /* It takes nothing, so it never holds up the waiters behind it. */
  if (op->parked.notify) {
    ephd_gate_unpark(w);
    answer_ready(ephd_deferred_conn(op->parked.deferred), q);
    return 1;
  }
  /* windowBuffer: a woken pop waits up to window_ms (never past its own
   * timeout) for its batch to reach window_count, and holds its place in
   * line meanwhile so later pops do not take the messages it waits on. */
  const ephd_options_t *o = ephd_queue_options(q);
  uint64_t want = o->window_count < batch ? o->window_count : batch;
  if (want > 1 && ephd_engine_available(q, w->ring, g, want) < want) {
    if (!op->parked.windowed) {
      uint64_t until = ephd_ffi_now_ms() + o->window_ms;
      if (until > op->parked.deadline_ms) until = op->parked.deadline_ms;
      op->parked.windowed = 1;
      ephd_deferred_deadline(op->parked.deferred, until);
    }
    return 0;
  }
  ephd_gate_unpark(w);
  answer_parked(op, 1);
  return 1;
}

/* Its queue was deleted (the gate has unparked it), its timeout passed, or
 * the broker stops: what its window gathered, or an empty batch. */
static void on_flush(ephd_waiter_t *w) {
  ephd_op_state_t *op = parked_op(w);
  answer_parked(op, op->parked.windowed);
}

static void on_deadline(void *data) {
  ephd_op_state_t *op = data;
  ephd_gate_unpark(&op->parked.waiter);
  answer_parked(op, op->parked.windowed);
}

/* A pop gathering its window held its place in line and stopped every
 * wake at itself: leaving, it hands the messages it waited on to the pops
 * parked behind it, which would otherwise wait for the next push. */
static void on_cancel(void *data) {
  ephd_op_state_t *op = data;
  ephd_gate_unpark(&op->parked.waiter);
  if (op->parked.windowed)
    ephd_engine_wake_group(op->parked.queue, op->parked.waiter.ring,
                           op->parked.group);
}

static const ephd_deferred_ops_t PARKED = {
    .deadline = on_deadline,
    .cancel = on_cancel,
    .stop = on_deadline,
};

static void park(ephd_op_state_t *op, const ephd_request_t *req,
                 ephd_queue_t *q, ephd_ring_t *r, uint32_t g, uint64_t now) {
  const ephd_pop_args_t *a = &op->pub.pop;
  ephd_waiter_init(&op->parked.waiter, on_wake, on_flush);
  op->parked.waiter.ring = r;
  op->parked.queue = q;
  op->parked.group = g;
  op->parked.batch = a->batch;
  op->parked.batch_bytes = op->batch_bytes;
  op->parked.auto_ack = a->auto_ack;
  op->parked.notify = a->notify;
  op->parked.windowed = 0;
  op->parked.deadline_ms = now + a->timeout_ms;
  op->parked.deferred = ephd_http_defer(req, &PARKED, op);
  ephd_deferred_deadline(op->parked.deferred, op->parked.deadline_ms);
  ephd_gate_park(ephd_queue_gate(q, g), &op->parked.waiter);
}

/* Naming EPHD_QUEUE_MODE is naming no group: the shared cursor. */
static size_t group_len(const ephd_pop_args_t *a) {
  return a->group ? ephd_group_len(a->group, a->group_len) : 0;
}

int ephd_pop_finds_here(const ephd_pop_args_t *a, const char *tenant,
                        size_t tenant_len) {
  ephd_engine_t *e = ephd_commands_engine;
  ephd_queue_t *q =
      ephd_engine_queue(e, tenant, tenant_len, a->queue, a->queue_len);
  uint32_t g = 0;
  int new_group =
      q == NULL ||
      !ephd_queue_group_find(q, a->group ? a->group : "", group_len(a), &g);
  return ephd_engine_would_deliver(e, q, NULL, 0, new_group, g,
                                   ephd_ffi_now_ms());
}

int ephd_pop_knows_group(const ephd_pop_args_t *a, const char *tenant,
                         size_t tenant_len) {
  ephd_queue_t *q = ephd_engine_queue(ephd_commands_engine, tenant, tenant_len,
                                      a->queue, a->queue_len);
  uint32_t g;
  return q != NULL &&
         ephd_queue_group_find(q, a->group ? a->group : "", group_len(a), &g);
}

uint64_t ephd_pop_group_hash(const char *tenant, size_t tenant_len,
                             const ephd_pop_args_t *a) {
  uint64_t h = 14695981039346656037ull; /* FNV-1a */
  const char *parts[3] = {tenant, a->queue, a->group};
  size_t lens[3] = {tenant_len, a->queue_len, a->group ? a->group_len : 0};
  for (int i = 0; i < 3; i++) {
    for (size_t j = 0; j < lens[i]; j++)
      h = (h ^ (unsigned char)parts[i][j]) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  }
  return h;
}

void ephd_pop_answer_empty(ephd_conn_t *c, const char *queue, size_t len) {
  ephd_buf_appends(begin_answer(c, queue, len), "]}");
  ephd_http_end(c);
}

int ephd_ffi_pop(const ephd_request_t *req) {
  ephd_engine_t *e = ephd_commands_engine;
  ephd_op_state_t *op = ephd_op_of(req);
  const ephd_pop_args_t *a = &op->pub.pop;
  const ephd_tenant_limits_t *limits = a->limits;
  ephd_tenant_t *t = ephd_engine_tenant(e, a->tenant, a->tenant_len);
  ephd_queue_t *q = t ? ephd_tenant_queue(t, a->queue, a->queue_len) : NULL;
  ephd_ring_t *r = a->partition && q
                       ? ephd_queue_ring(q, a->partition, a->partition_len)
                       : NULL;
  const char *gname = a->group ? a->group : "";
  size_t glen = group_len(a);
  int named = glen > 0;
  uint32_t g = 0;
  int new_ring = a->partition && r == NULL;
  int new_group = q == NULL || !ephd_queue_group_find(q, gname, glen, &g);
  /* A new implicit queue's options are asked for before anything exists,
   * as a push's (commands.c). */
  if (q == NULL && e->ask_options && !op->pub.has_created)
    return EPHD_E_NEW_QUEUE;
  uint64_t now = ephd_ffi_now_ms();
  /* Everything a pop would create is planned before any of it exists: a
   * refused pop leaves no tenant, queue, partition or group behind. */
  uint32_t refusals = 0;
  if (q == NULL && ephd_tenant_full_of_queues(t, limits))
    refusals |= EPHD_REFUSE_TENANT_QUEUES;
  if (q && new_ring && ephd_queue_full_of_partitions(e, q))
    refusals |= EPHD_REFUSE_QUEUE_PARTS;
  if (q && named && new_group && ephd_queue_full_of_groups(e, q))
    refusals |= EPHD_REFUSE_QUEUE_GROUPS;
  /* Queue mode's cursor is made by a queue's first pop and names nothing
   * the client chose: it is charged, never refused, or a full cell could
   * not be drained by a consumer that had not popped yet. */
  int named_group = new_group && (named || q == NULL);
  refusals |=
      ephd_engine_plan_names(e, t, a->tenant_len, q, a->queue_len, new_ring,
                             a->partition_len, named_group, glen, limits);
  /* Whether it would park is known before anything exists too, so a pop
   * refused for the tenant's parked slots leaves nothing behind either. */
  if (a->wait && a->timeout_ms && limits && limits->max_parked && t &&
      ephd_tenant_parked(t) >= limits->max_parked &&
      !ephd_engine_would_deliver(e, q, r, new_ring, new_group, g, now))
    refusals |= EPHD_REFUSE_PARKED;
  op->pub.refusals = refusals;
  if (refusals) return EPHD_E_REFUSED;
  if (q == NULL) {
    q = ephd_engine_queue_open(e, a->tenant, a->tenant_len, a->queue,
                               a->queue_len);
    if (op->pub.has_created) q->opts = op->pub.created;
  }
  if (new_ring) r = ephd_queue_ring_open(q, a->partition, a->partition_len);
  if (new_group) g = ephd_queue_group_open(q, gname, glen);
  /* Whether it parks is asked before anything is taken, so the answer
   * can be written as the batch is taken. */
  if (a->wait && a->timeout_ms &&
      !ephd_engine_would_deliver(e, q, r, 0, 0, g, now)) {
    ephd_engine_touch(e, q, now);
    park(op, req, q, r, g, now);
    return EPHD_PARKED;
  }
  if (a->notify) {
    if (ephd_engine_would_deliver(e, q, r, 0, 0, g, now))
      answer_ready(ephd_http_conn(req), q);
    else
      answer_pop(ephd_http_conn(req), q, r, g, 0, 0, 0, 0);
  } else
    answer_pop(ephd_http_conn(req), q, r, g, a->batch, op->batch_bytes,
               a->auto_ack, 1);
  return EPHD_OK;
}
