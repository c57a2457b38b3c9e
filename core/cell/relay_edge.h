/* The relay at the edge: a request that core/cell/routing.h decided to
 * serve elsewhere is held (http.h) and sent once to that member with the
 * forward mark over the peer client (peer_client.h), and the member's
 * answer is passed back as it came; an ack whose ids several members hold
 * is split by holder and its parts' answers merged. At the owner, a marked
 * request is trusted only with the cell token, and one the route finds not
 * owned here is answered owner_moved. The edge decides nothing but a
 * retry: an owner_moved answer is sent once more to the owner placement
 * names now.
 *
 * The mark (core/cell/mark.h) is one header carrying the tenant, signed
 * with the cell token for the request and the time: the edge ran the whole
 * ladder (kill switch, identity, grant, shape, rate), so the owner takes
 * the tenant from it and runs none of identity, grant or rate again; it
 * still checks the queue's bounds and budgets at commit.
 *
 * Nothing here runs in a cell of one, and without a cell token a broker
 * never relays. */
#ifndef EPHD_RELAY_EDGE_H
#define EPHD_RELAY_EDGE_H

#include <stddef.h>

#include "buf.h"
#include "engine.h"
#include "ffi.h"
#include "op.h"
#include "placement.h"

/* Gives a tenant back rate it was charged (the Lua side's). */
typedef void (*ephd_relay_refund_fn)(const char *tenant, size_t tenant_len,
                                     uint32_t cost);

/* The cell token (NULL: none, and this broker never relays nor trusts a
 * mark), which must outlive the broker, and the deadline of a relayed
 * request that does not park (QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS). refund
 * gives back what the rate took for a relayed push its owner refused.
 * batch_bytes bounds a relayed pop's batch (ephd_relay_batch_bytes). */
void ephd_relay_init(const char *cell_token, uint64_t timeout_ms,
                     size_t batch_bytes, ephd_relay_refund_fn refund);

/* Whether a request may be sent on to other members: this broker has a
 * cell token, and the request is not itself one a member sent (a relayed
 * or fanned-out request is served where it lands, never sent on again). */
int ephd_relay_sends_on(const ephd_request_t *req);

/* The most bytes of deliveries a pop's answer may take before its last
 * one: for a pop a member relayed here, what keeps the answer within what
 * the member's relay accepts (a batch it refused would be taken here and
 * lost there); SIZE_MAX for a client's own pop. */
size_t ephd_relay_batch_bytes(const ephd_request_t *req);

/* The deadline of a relayed request that does not park. */
uint64_t ephd_relay_timeout_ms(void);
/* The tag of a tenant's share of each member's parking lane (peer_client.h's
 * max_parked_share, QUEEN_EPHEMERAL_RELAY_TENANT_PARKED): never 0. */
uint64_t ephd_relay_share(const char *tenant, size_t len);
/* Answers a relayed wait the tenant's share refused: 429 rate_limited, as
 * its own parked-pop slots would, with a Retry-After. */
void ephd_relay_share_refused(ephd_conn_t *c);

/* Whether this broker relays, and trusts a mark: it has a cell token. */
int ephd_relay_enabled(void);

/* Relays req to owner, which placement named for (tenant, queue,
 * partition): a hand-over of that partition still pending here is sent
 * first, so the owner merges it before serving this; then the request is
 * held, sent as it came (its path, query and body) and answered with the
 * owner's answer, or failed (ephemeral_forward_failed) when the owner is
 * not reached. park_ms: how long the owner may hold it (a pop's timeout
 * when it waits), or 0. taken: what the rate was charged for a push,
 * given back if the owner answers anything but a success (a refused push
 * appends nothing), or 0. An ack names no queue or partition: its owner is
 * its ids' holder. Always EPHD_RELAYED: req is answered or held. */
int ephd_relay_to(const ephd_request_t *req, ephd_cell_verb_t verb,
                  const ephd_member_t *owner, uint64_t park_ms, uint32_t taken,
                  const char *tenant, size_t tenant_len, ephd_slice_t queue,
                  ephd_slice_t partition);

/* A marked request (a member's relay) for a partition this broker's view
 * gives owner: answered owner_moved, never relayed again, so two views
 * cannot send a request around. The answer names owner's id for the edge
 * alone (X-Queen-Owner, never passed to a client): an edge whose own view
 * has not taken in a member that just joined (not probed yet) sends its
 * one retry there rather than to the same member again. EPHD_RELAYED. */
int ephd_relay_owner_moved(const ephd_request_t *req, ephd_cell_verb_t verb,
                           const ephd_member_t *owner);

/* Settles id i of an ack here and says how it went. */
typedef ephd_outcome_t (*ephd_relay_ack_here_fn)(void *data, uint32_t i);

/* holder[i] for an id this broker settles itself. */
#define EPHD_RELAY_HERE UINT32_MAX

/* An ack whose ids several members hold, holder[i] naming id i's (an index
 * into view, or EPHD_RELAY_HERE): split by holder, here's ids settled now
 * through here(data, i), each other part relayed once, and the results
 * merged in the request's order (docs/cell.md says what the ids of a part
 * not answered get). EPHD_RELAYED: req is answered or held. */
int ephd_relay_ack_split(const ephd_request_t *req, const ephd_view_t *view,
                         const uint32_t *holder, const char *tenant,
                         size_t tenant_len, const ephd_scan_t *scan,
                         const ephd_ack_item_t *acks, const char *ids,
                         ephd_relay_ack_here_fn here, void *data);

/* The outcomes of an ack's answer, {"results":[{"id":..,"outcome":..},
 * ...]} as a member writes it: 0 with out[0..n) when it holds exactly n
 * results, each with a known outcome, in their order; -1 otherwise (out
 * partly written). What a split ack reads of each part's answer. */
int ephd_relay_ack_outcomes(const char *body, size_t len, ephd_outcome_t *out,
                            uint32_t n);

/* How a pop naming no partition that whole_pop.c served over the cell
 * ended (its client answered with a batch or, once some member answered,
 * an empty one; no member answered; its client left; this broker
 * stopped): counted in queen_ephemeral_forwarded_total{route="pop_whole"}. */
typedef enum {
  EPHD_WHOLE_ANSWERED,
  EPHD_WHOLE_FAILED,
  EPHD_WHOLE_CANCELLED,
  EPHD_WHOLE_STOPPED,
  EPHD_WHOLE_OUTCOMES
} ephd_whole_outcome_t;
void ephd_relay_count_whole_pop(ephd_whole_outcome_t outcome);

/* queen_ephemeral_forwarded_total and the relay's latency, for /metrics. */
void ephd_relay_metrics(ephd_buf_t *o);

/* A request's copy as a member of the cell sends it on: its target (path
 * and query, and extra_query's "name=value" after it unless NULL), its headers
 * (Content-Type with a body, and the forward mark for tenant) and its body, one
 * after the other. size gives the bytes it takes and the three parts' lengths;
 * write writes it at p (size's bytes, and the cell token must be set) and
 * returns its end. */
typedef struct {
  size_t target_len, headers_len, body_len;
} ephd_marked_t;
size_t ephd_relay_marked_size(const ephd_request_t *req, size_t tenant_len,
                              const char *extra_query, ephd_marked_t *m);
char *ephd_relay_write_marked(char *p, const ephd_request_t *req,
                              const char *extra_query, const char *tenant,
                              size_t tenant_len);

#endif
