/* push, ack and reset: each commits what its parse left in the request's
 * operation. */
#include "commands.h"

#include <string.h>

#include "ack_result.h"
#include "clock.h"
#include "http.h"
#include "json.h"
#include "op.h"

ephd_engine_t *ephd_commands_engine;

void ephd_commands_init(ephd_engine_t *engine) {
  ephd_commands_engine = engine;
}

void ephd_ffi_queue_options(int asked) {
  ephd_commands_engine->ask_options = asked;
}

int ephd_ffi_push_commit(const ephd_request_t *req, const char *tenant,
                         size_t tenant_len,
                         const ephd_tenant_limits_t *limits) {
  ephd_engine_t *e = ephd_commands_engine;
  ephd_op_state_t *op = ephd_op_of(req);
  const ephd_scan_t *s = &op->pub.scan;
  op->pub.refusals = 0;
  const char *body = op->scanned;
  if (body == NULL) return EPHD_E_BAD_REQUEST;
  ephd_tenant_t *t = ephd_engine_tenant(e, tenant, tenant_len);
  ephd_queue_t *q = t ? ephd_tenant_queue(t, s->queue.ptr, s->queue.len) : NULL;
  /* Asked before anything is taken, and only for a queue that does not
   * exist: a push to one that does never leaves C. */
  const ephd_options_t *created = op->pub.has_created ? &op->pub.created : NULL;
  if (q == NULL && e->ask_options && created == NULL) return EPHD_E_NEW_QUEUE;
  op->scanned = NULL;
  uint64_t now = ephd_ffi_now_ms();
  if (q) ephd_engine_expire(e, q, now);
  ephd_ring_t *r =
      q ? ephd_queue_ring(q, s->partition.ptr, s->partition.len) : NULL;
  /* Planned before anything exists: a refused push leaves no queue or
   * partition behind. */
  ephd_push_plan_t plan;
  ephd_engine_plan_push(e, t, tenant_len, q, s->queue.len, r, s->partition.len,
                        s->count, s->bytes, limits, created, &plan);
  op->pub.refusals = plan.refusals;
  if (plan.refusals) return EPHD_E_REFUSED;
  if (q == NULL) {
    q = ephd_engine_queue_open(e, tenant, tenant_len, s->queue.ptr,
                               s->queue.len);
    if (created) q->opts = *created;
  }
  if (r == NULL)
    r = ephd_queue_ring_open(q, s->partition.ptr, s->partition.len);
  ephd_engine_push(e, q, r, body, (const ephd_span_t *)op->items.base, s->count,
                   &plan, now);
  ephd_engine_touch(e, q, now);
  /* The commit answers its own 201, as pop and ack do: the count is a
   * number here, and a Lua string of it would be built per push. */
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_t *out = ephd_http_begin(c, 201, NULL);
  ephd_buf_appends(out, "{\"pushed\":");
  ephd_buf_append_u64(out, s->count);
  ephd_buf_append(out, "}", 1);
  ephd_http_end(c);
  return EPHD_OK;
}

/* The ack's queue and its group's cursor (UINT32_MAX: none), touched as
 * used. */
static ephd_queue_t *ack_queue(const ephd_scan_t *s, const char *tenant,
                               size_t tenant_len, uint64_t now, uint32_t *g) {
  ephd_engine_t *e = ephd_commands_engine;
  ephd_queue_t *q =
      ephd_engine_queue(e, tenant, tenant_len, s->queue.ptr, s->queue.len);
  *g = UINT32_MAX;
  if (q) {
    ephd_engine_touch(e, q, now);
    const char *gname = s->has_group ? s->group.ptr : "";
    size_t glen = s->has_group ? s->group.len : 0;
    if (!ephd_queue_group_find(q, gname, glen, g)) *g = UINT32_MAX;
  }
  return q;
}

void ephd_ack_here_init(ephd_ack_here_t *a, const ephd_request_t *req,
                        const char *tenant, size_t tenant_len) {
  ephd_op_state_t *op = ephd_op_of(req);
  *a = (ephd_ack_here_t){.scan = &op->pub.scan,
                         .tenant = tenant,
                         .tenant_len = tenant_len,
                         .acks = (const ephd_ack_item_t *)op->items.base,
                         .ids = op->names.base};
}

ephd_outcome_t ephd_ack_here(void *data, uint32_t i) {
  ephd_ack_here_t *a = data;
  if (!a->found) {
    a->now = ephd_ffi_now_ms();
    a->q = ack_queue(a->scan, a->tenant, a->tenant_len, a->now, &a->g);
    a->found = 1;
  }
  const ephd_ack_item_t *it = &a->acks[i];
  return ephd_engine_ack(ephd_commands_engine, a->q, a->g, a->ids + it->off,
                         it->len, it->status, a->now);
}

int ephd_ffi_ack_commit(const ephd_request_t *req, const char *tenant,
                        size_t tenant_len) {
  ephd_engine_t *e = ephd_commands_engine;
  ephd_op_state_t *op = ephd_op_of(req);
  const ephd_scan_t *s = &op->pub.scan;
  if (op->scanned == NULL) return EPHD_E_BAD_REQUEST;
  op->scanned = NULL;
  const ephd_ack_item_t *acks = (const ephd_ack_item_t *)op->items.base;
  const char *ids = op->names.base;
  uint64_t now = ephd_ffi_now_ms();
  uint32_t g;
  ephd_queue_t *q = ack_queue(s, tenant, tenant_len, now, &g);
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"results\":[");
  for (uint32_t i = 0; i < s->count; i++) {
    const char *id = ids + acks[i].off;
    ephd_outcome_t o =
        ephd_engine_ack(e, q, g, id, acks[i].len, acks[i].status, now);
    ephd_ack_write_result(out, i == 0, id, acks[i].len, o);
  }
  ephd_buf_appends(out, "]}");
  /* The answer ends the request, and its operation with it. */
  ephd_http_end(c);
  return EPHD_OK;
}

uint64_t ephd_ffi_reset(const char *tenant, size_t tenant_len,
                        const char *queue, size_t queue_len) {
  ephd_engine_t *e = ephd_commands_engine;
  ephd_queue_t *q = ephd_engine_queue(e, tenant, tenant_len, queue, queue_len);
  return q ? ephd_engine_reset(e, q) : 0;
}
