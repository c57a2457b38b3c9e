/* The cell's admin fan-out: reset and delete are applied by each broker to
 * its own copy of a queue (docs/cell.md), so the broker a client asked
 * applies one here and then sends the same request, with the forward mark,
 * to every other live member of its view, best-effort. The client's answer
 * waits for the members' answers (so a push that follows a reset is not
 * dropped by it on a slow member) but counts only what this broker
 * dropped: a member that fails or refuses is counted and logged, never the
 * client's error.
 *
 * A marked request is applied where it lands and never fanned out again,
 * so two brokers cannot send an admin verb around. Nothing here runs in a
 * cell of one or without a cell token. */
#ifndef EPHD_FANOUT_H
#define EPHD_FANOUT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "ffi.h"

typedef struct ephd_fanout ephd_fanout_t;

/* The verbs fanned out: the metrics' route label. */
typedef enum {
  EPHD_FANOUT_RESET,
  EPHD_FANOUT_DELETE,
  EPHD_FANOUT_VERBS
} ephd_fanout_verb_t;

/* How long a member's answer is waited for (QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS,
 * as a relayed push's). Whether anything is fanned out at all is the cell
 * token's (ephd_relay_sends_on). */
void ephd_fanout_init(uint64_t timeout_ms);

/* A copy of the request being dispatched, for the other live members: NULL
 * when there is nobody to send it to (a cell of one, no token, or the
 * request is marked: a fan-out already). The copy outlives the request. */
ephd_fanout_t *ephd_fanout_new(const ephd_request_t *req,
                               ephd_fanout_verb_t verb, const char *tenant,
                               size_t tenant_len);
/* Sends f to every other member of the view as it is now. 0: done(data)
 * runs once each has answered or failed (never from inside this call), and
 * f is freed after it; -1: no member could be sent to (each is counted
 * failed), done never runs, and f is freed already. */
int ephd_fanout_send(ephd_fanout_t *f, void (*done)(void *data), void *data);
/* A copy never sent (the write it was to follow failed). */
void ephd_fanout_free(ephd_fanout_t *f);

/* queen_ephemeral_fanout_total, for /metrics. */
void ephd_fanout_metrics(ephd_buf_t *o);

#endif
