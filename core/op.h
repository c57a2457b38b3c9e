/* A request's operation: everything its parse hands its commit (a body's
 * scan, a pop's arguments, a configure's options, the budgets a commit
 * would break), owned by that request alone. Requests in flight together
 * (a held configure, parked pops, the push that wakes them) share none of
 * it. Lua reaches the part ffi.h declares (ephd_op_t) as ctx.op, through
 * req->op; the rest is C's.
 *
 * An operation is taken from a free list when its request is dispatched
 * and given back when it is answered or its client leaves, so the hot path
 * allocates nothing once warm and an idle connection holds none. */
#ifndef EPHD_OP_H
#define EPHD_OP_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "engine.h"
#include "ffi.h"
#include "gate.h"
#include "http.h"

/* One ack of a scanned body: its id (in the operation's names) and status. */
typedef struct {
  uint32_t off, len;
  ephd_ack_status_t status;
} ephd_ack_item_t;

typedef struct ephd_op_state {
  ephd_op_t pub; /* first: req->op points at it */
  /* The body a scan accepted, for the commit of the same request; NULL:
   * nothing to commit. */
  const char *scanned;
  /* The most bytes of deliveries a pop's answer may take before its last:
   * SIZE_MAX, unless the route found the pop relayed here by a member
   * (ephd_relay_batch_bytes). */
  size_t batch_bytes;
  ephd_buf_t names; /* decoded names and ack ids, which the slices point at */
  /* A push's payload spans (ephd_span_t), an ack's items (ephd_ack_item_t),
   * or a pop's deliveries as JSON. */
  ephd_buf_t items;
  ephd_buf_t key, value; /* a key with escapes, and a string value, decoded */
  /* Where a scanned body's queue and second name (a push's partition) lie
   * in it, inside their quotes, when they hold no escape (0: not so, or not
   * named): what the scan's frame names (core/scan.h). */
  uint32_t queue_at, second_at;
  /* The scan's frame a member of the cell sent with this push, once its
   * forward mark is trusted (empty otherwise): read instead of the body. */
  ephd_slice_t frame;
  /* A parked pop: its place on its group's gate, the hold of its answer,
   * and what each wake runs again. */
  struct {
    ephd_waiter_t waiter;
    ephd_deferred_t *deferred;
    ephd_queue_t *queue;
    uint32_t group, batch;
    size_t batch_bytes; /* the operation's */
    int auto_ack;
    int notify;           /* answers ready, takes nothing (ephd_pop_args_t) */
    int windowed;         /* woken, and fattening its batch (windowBuffer) */
    uint64_t deadline_ms; /* its timeout */
  } parked;
  struct ephd_op_state *next_free;
} ephd_op_state_t;

static inline ephd_op_state_t *ephd_op_of(const ephd_request_t *req) {
  return (ephd_op_state_t *)req->op;
}

/* Gives req an operation of its own. */
void ephd_op_attach(ephd_request_t *req);
/* req is answered, or its client left: its operation goes back. */
void ephd_op_release(ephd_request_t *req);
/* Frees the free list (at exit, for the leak checker). */
void ephd_op_close(void);

#endif
