/* The cell's relay, the daemon's half (relay.c is the client it sends
 * with). At the edge, a request whose partition another member owns is
 * held (http.h) and sent once to that owner with the forward mark, and the
 * owner's answer is passed back as it came. At the owner, a marked request
 * is trusted only with the cell token, and refused as owner_moved when this
 * broker's view gives its partition to another member.
 *
 * The mark is one header, "X-Queen-Forward: <cell token> <tenant>": the
 * edge ran the whole ladder (kill switch, identity, grant, shape, rate), so
 * the owner takes the tenant from it and runs none of identity, grant or
 * rate again; it still checks the queue's bounds and budgets at commit.
 *
 * Nothing here runs in a cell of one: callers look at the view's count
 * first, and without a cell token a broker never relays. */
#ifndef EPHD_FORWARD_H
#define EPHD_FORWARD_H

#include <stddef.h>

#include "buf.h"
#include "ffi.h"
#include "placement.h"

/* The verbs the relay carries: the metrics' route label. */
typedef enum {
  EPHD_FORWARD_PUSH,
  EPHD_FORWARD_POP,
  EPHD_FORWARD_ACK,
  EPHD_FORWARD_VERBS
} ephd_forward_verb_t;

/* The cell token (NULL: none, and this broker never relays nor trusts a
 * mark), which must outlive the broker, and the deadline of a relayed
 * request that does not park (QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS). */
void ephd_forward_init(const char *cell_token, uint64_t timeout_ms);

/* For a request that passed the ladder, in a view of more than one member:
 * EPHD_OK when this broker owns (tenant, queue, partition) and serves it;
 * otherwise EPHD_RELAYED, the request answered or held: sent to its owner,
 * or, marked (a relay already), refused as owner_moved. park_ms: how long
 * the owner may hold it (a pop's timeout when it waits), or 0. The
 * request is sent again as it came: its path, query and body. */
int ephd_forward_route(const ephd_request_t *req, ephd_forward_verb_t verb,
                       uint64_t park_ms, const ephd_view_t *view,
                       const char *tenant, size_t tenant_len,
                       ephd_slice_t queue, ephd_slice_t partition);

/* An ack, in a view of more than one member, whose ids all carry the epoch
 * of another live member: that incarnation issued them and holds their
 * messages, so the ack goes there (an exact owner, where hashing would
 * name the partition's owner now, maybe not the one that holds them).
 * EPHD_OK when it is served here: no token, marked already, the epoch is
 * this broker's or no live member's (the ids then answer stale here). */
int ephd_forward_ack(const ephd_request_t *req, const ephd_view_t *view,
                     uint32_t epoch, const char *tenant, size_t tenant_len);

/* queen_ephemeral_forwarded_total and the relay's latency, for /metrics. */
void ephd_forward_metrics(ephd_buf_t *o);

#endif
