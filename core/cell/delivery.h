/* commitOnDelivery (autoAck) across the cell: a pop served at one member
 * for a client at another is never committed where it is taken. The edge
 * sends it without the parameter, so the member leases its batch, and
 * acks the batch's ids there once the client's answer is written. A client
 * that leaves first, a relay cancelled, a broker that stops: the leases
 * expire and the messages are redelivered, never taken for an answer
 * nobody got. The price is the at-most-once promise's edge: an ack that
 * does not arrive redelivers a batch the client had (docs/cell.md). Used
 * by the relay of a pop naming a partition (relay_edge.c) and by the pop
 * over the whole cell (whole_pop.c). */
#ifndef EPHD_DELIVERY_H
#define EPHD_DELIVERY_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "ffi.h"
#include "peer_client.h"

/* Whether a pop's query parameter named k (n bytes) asks to commit on
 * delivery: one the edge drops before sending the pop on. */
int ephd_delivery_commits(const char *k, size_t n);

/* query's parameters at p, each after '?' for the first written and '&'
 * after, but those drop names (drop NULL: none): the end of what it wrote.
 * A key spelled with escapes is not recognised and is kept. */
char *ephd_delivery_query(char *p, ephd_slice_t query, int first,
                          int (*drop)(const char *k, size_t n));

/* What a member's answer to a pop says: -1 when its body is not a pop's
 * answer; else *ready ("ready":true, a notify's answer) and *count
 * messages, with their ids appended to ids (unless NULL) as the items of
 * an ack's "acks" array, {"id":".."} joined by commas. */
int ephd_delivery_read(const ephd_peer_response_t *res, ephd_buf_t *ids,
                       uint32_t *count, int *ready);

/* Acks ids (as ephd_delivery_read wrote them) at peer for tenant's queue
 * and group (NULL: the queue mode), marked, within timeout_ms (the relay's
 * deadline): sent and forgotten, since an
 * ack that fails leaves leases that expire, which is the contract's
 * redelivery. */
void ephd_delivery_ack(ephd_peer_t *peer, const char *tenant, size_t tenant_len,
                       const char *queue, size_t queue_len, const char *group,
                       size_t group_len, const ephd_buf_t *ids,
                       uint64_t timeout_ms);

#endif
