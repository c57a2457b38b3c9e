/* push, ack and reset: each commits what its parse left in the request's
 * operation. */
#include "commands.h"

#include <string.h>

#include "clock.h"
#include "forward.h"
#include "http.h"
#include "json.h"
#include "members.h"
#include "op.h"

ephd_engine_t *ephd_commands_engine;

void ephd_commands_init(ephd_engine_t *engine) {
  ephd_commands_engine = engine;
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
  op->scanned = NULL;
  /* A cell of one reads the view's count and nothing else. */
  const ephd_view_t *view = ephd_members_view();
  if (view->count > 1 &&
      ephd_forward_route(req, EPHD_FORWARD_PUSH, 0, view, tenant, tenant_len,
                         s->queue, s->partition) != EPHD_OK)
    return EPHD_RELAYED;
  uint64_t now = ephd_ffi_now_ms();
  ephd_tenant_t *t = ephd_engine_tenant(e, tenant, tenant_len);
  ephd_queue_t *q = t ? ephd_tenant_queue(t, s->queue.ptr, s->queue.len) : NULL;
  if (q) ephd_engine_expire(e, q, now);
  ephd_ring_t *r =
      q ? ephd_queue_ring(q, s->partition.ptr, s->partition.len) : NULL;
  /* Planned before anything exists: a refused push leaves no queue or
   * partition behind. */
  ephd_push_plan_t plan;
  ephd_engine_plan_push(e, t, tenant_len, q, s->queue.len, r, s->partition.len,
                        s->count, s->bytes, limits, &plan);
  op->pub.refusals = plan.refusals;
  if (plan.refusals) return EPHD_E_REFUSED;
  if (q == NULL)
    q = ephd_engine_queue_open(e, tenant, tenant_len, s->queue.ptr,
                               s->queue.len);
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

static const char *const outcome_names[] = {"acked", "redelivered", "stale",
                                            "unknown"};

void ephd_ack_write_result(ephd_buf_t *out, int first, const char *id,
                           size_t len, ephd_outcome_t outcome) {
  ephd_buf_appends(out, first ? "{\"id\":" : ",{\"id\":");
  ephd_json_write_string(out, id, len);
  ephd_buf_appends(out, ",\"outcome\":\"");
  ephd_buf_appends(out, outcome_names[outcome]);
  ephd_buf_appends(out, "\"}");
}

int ephd_ack_outcome_named(const char *name, size_t len,
                           ephd_outcome_t *outcome) {
  for (int o = 0; o < 4; o++)
    if (strlen(outcome_names[o]) == len &&
        memcmp(outcome_names[o], name, len) == 0) {
      *outcome = (ephd_outcome_t)o;
      return 0;
    }
  return -1;
}

/* What settling an ack's ids here needs: its queue and group, found when
 * the first id is settled. */
typedef struct {
  const ephd_scan_t *scan;
  const char *tenant;
  size_t tenant_len;
  const ephd_ack_item_t *acks;
  const char *ids;
  ephd_queue_t *q;
  uint32_t g;
  uint64_t now;
  int found;
} ack_here_t;

static void ack_find(ack_here_t *a) {
  ephd_engine_t *e = ephd_commands_engine;
  const ephd_scan_t *s = a->scan;
  a->q = ephd_engine_queue(e, a->tenant, a->tenant_len, s->queue.ptr,
                           s->queue.len);
  a->g = UINT32_MAX;
  a->now = ephd_ffi_now_ms();
  a->found = 1;
  if (a->q) {
    ephd_engine_touch(e, a->q, a->now);
    const char *gname = s->has_group ? s->group.ptr : "";
    size_t glen = s->has_group ? s->group.len : 0;
    if (!ephd_queue_group_find(a->q, gname, glen, &a->g)) a->g = UINT32_MAX;
  }
}

static ephd_outcome_t ack_one(ack_here_t *a, uint32_t i) {
  return ephd_engine_ack(ephd_commands_engine, a->q, a->g,
                         a->ids + a->acks[i].off, a->acks[i].len,
                         a->acks[i].status, a->now);
}

/* For an ack split over the cell: its ids this broker holds, one by one. */
static ephd_outcome_t ack_here(void *data, uint32_t i) {
  ack_here_t *a = data;
  if (!a->found) ack_find(a);
  return ack_one(a, i);
}

int ephd_ffi_ack_commit(const ephd_request_t *req, const char *tenant,
                        size_t tenant_len) {
  ephd_op_state_t *op = ephd_op_of(req);
  const ephd_scan_t *s = &op->pub.scan;
  if (op->scanned == NULL) return EPHD_E_BAD_REQUEST;
  op->scanned = NULL;
  ack_here_t a = {.scan = s,
                  .tenant = tenant,
                  .tenant_len = tenant_len,
                  .acks = (const ephd_ack_item_t *)op->items.base,
                  .ids = op->names.base};
  /* A cell of one reads the view's count and nothing else. */
  const ephd_view_t *view = ephd_members_view();
  if (view->count > 1 &&
      ephd_forward_ack(req, view, tenant, tenant_len, s, a.acks, a.ids,
                       ack_here, &a) != EPHD_OK)
    return EPHD_RELAYED;
  ack_find(&a);
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"results\":[");
  for (uint32_t i = 0; i < s->count; i++)
    ephd_ack_write_result(out, i == 0, a.ids + a.acks[i].off, a.acks[i].len,
                          ack_one(&a, i));
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
