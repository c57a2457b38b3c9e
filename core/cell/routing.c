/* The routing decision: see routing.h. */
#include "routing.h"

#include <stdlib.h>

#include "commands.h"
#include "groups.h"
#include "id.h"
#include "members.h"
#include "op.h"
#include "placement.h"
#include "relay_edge.h"
#include "whole_pop.h"

/* A push or a pop of one partition: here when this broker owns it. */
static int to_owner(const ephd_request_t *req, ephd_cell_verb_t verb,
                    const ephd_view_t *view, uint64_t park_ms, uint32_t taken,
                    const char *tenant, size_t tenant_len, ephd_slice_t queue,
                    ephd_slice_t partition) {
  const ephd_member_t *owner =
      ephd_placement_owner(view, tenant, tenant_len, queue.ptr, queue.len,
                           partition.ptr, partition.len);
  if (owner == &view->members[view->self]) return EPHD_OK;
  if (req->forward.len > 0) return ephd_relay_owner_moved(req, verb, owner);
  return ephd_relay_to(req, verb, owner, park_ms, taken, tenant, tenant_len,
                       queue, partition);
}

static int route_push(const ephd_request_t *req, const ephd_view_t *view,
                      const char *tenant, size_t tenant_len, uint32_t taken) {
  const ephd_op_state_t *op = ephd_op_of(req);
  const ephd_scan_t *s = &op->pub.scan;
  /* Nothing to commit (an empty array is answered here; a body not
   * scanned is the commit's to refuse). */
  if (op->scanned == NULL || s->count == 0) return EPHD_OK;
  return to_owner(req, EPHD_CELL_PUSH, view, 0, taken, tenant, tenant_len,
                  s->queue, s->partition);
}

static int route_pop(const ephd_request_t *req, const ephd_view_t *view,
                     const char *tenant, size_t tenant_len) {
  const ephd_pop_args_t *a = &ephd_op_of(req)->pub.pop;
  uint64_t park_ms = a->wait ? a->timeout_ms : 0;
  ephd_slice_t queue = {a->queue, a->queue_len};
  /* A group this broker has not seen, or not since a member joined, is
   * made known to the whole cell first, so no member frees what it has
   * not read (groups.h). */
  if (req->forward.len == 0)
    ephd_groups_announce(req, view, tenant, tenant_len);
  if (a->partition)
    return to_owner(req, EPHD_CELL_POP, view, park_ms, 0, tenant, tenant_len,
                    queue, (ephd_slice_t){a->partition, a->partition_len});
  /* The whole queue, over the cell (whole_pop.h). A member's take or
   * notify is served from what this broker holds; a take that finds
   * nothing makes nothing here, while a notify (a waiting one, or a
   * group's announcement: groups.h) makes the queue and its group. */
  if (req->forward.len == 0)
    return ephd_whole_pop(req, view, tenant, tenant_len);
  if (park_ms || a->notify || ephd_pop_finds_here(a, tenant, tenant_len))
    return EPHD_OK;
  ephd_pop_answer_empty(ephd_http_conn(req), a->queue, a->queue_len);
  return EPHD_RELAYED;
}

/* The member whose epoch id i carries, as an index into view, or
 * EPHD_RELAY_HERE. */
static uint32_t holder(const ephd_view_t *view, const ephd_ack_item_t *acks,
                       const char *ids, uint32_t i) {
  ephd_id_t id;
  if (ephd_id_parse(ids + acks[i].off, acks[i].len, &id) != 0)
    return EPHD_RELAY_HERE;
  for (uint32_t m = 0; m < view->count; m++)
    if (view->members[m].epoch == id.epoch)
      return m == view->self ? EPHD_RELAY_HERE : m;
  return EPHD_RELAY_HERE;
}

static int route_ack(const ephd_request_t *req, const ephd_view_t *view,
                     const char *tenant, size_t tenant_len) {
  /* A member's relay is served where it lands. */
  if (req->forward.len > 0) return EPHD_OK;
  const ephd_op_state_t *op = ephd_op_of(req);
  if (op->scanned == NULL) return EPHD_OK;
  const ephd_scan_t *s = &op->pub.scan;
  const ephd_ack_item_t *acks = (const ephd_ack_item_t *)op->items.base;
  const char *ids = op->names.base;
  /* Whose ids: this broker's only (served here), one other member's only
   * (relayed whole, as it came), or several holders'. */
  uint32_t only = EPHD_RELAY_HERE;
  int mixed = 0;
  for (uint32_t i = 0; i < s->count && !mixed; i++) {
    uint32_t m = holder(view, acks, ids, i);
    if (i == 0)
      only = m;
    else if (m != only)
      mixed = 1;
  }
  ephd_slice_t none = {"", 0};
  if (!mixed)
    return only == EPHD_RELAY_HERE
               ? EPHD_OK
               : ephd_relay_to(req, EPHD_CELL_ACK, &view->members[only], 0, 0,
                               tenant, tenant_len, none, none);
  uint32_t *held = malloc(s->count * sizeof(*held));
  if (held == NULL) abort();
  for (uint32_t i = 0; i < s->count; i++) held[i] = holder(view, acks, ids, i);
  ephd_ack_here_t here;
  ephd_ack_here_init(&here, req, tenant, tenant_len);
  int rc = ephd_relay_ack_split(req, view, held, tenant, tenant_len, s, acks,
                                ids, ephd_ack_here, &here);
  free(held);
  return rc;
}

int ephd_ffi_cell_route(const ephd_request_t *req, ephd_cell_verb_t verb,
                        const char *tenant, size_t tenant_len, uint32_t taken) {
  /* A member's relayed pop answers within what that member's relay
   * accepts, wherever it is served. */
  if (req->forward.len > 0)
    ephd_op_of(req)->batch_bytes = ephd_relay_batch_bytes(req);
  const ephd_view_t *view = ephd_members_view();
  /* Without a token no mark can be trusted: every broker serves what it
   * is sent, as before the relay (docs/cell.md). */
  if (view->count <= 1 || !ephd_relay_enabled()) return EPHD_OK;
  switch (verb) {
    case EPHD_CELL_PUSH:
      return route_push(req, view, tenant, tenant_len, taken);
    case EPHD_CELL_POP:
      return route_pop(req, view, tenant, tenant_len);
    case EPHD_CELL_ACK:
      return route_ack(req, view, tenant, tenant_len);
    default:
      return EPHD_OK;
  }
}

const uint32_t *ephd_ffi_cell_size(void) { return &ephd_members_view()->count; }
