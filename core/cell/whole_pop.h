/* A pop naming no partition, over the whole cell: the queue's partitions
 * are spread over the members (placement.h), and the pop may return any of
 * them, whoever owns it, through any broker.
 *
 * The edge asks the members one at a time (a "take": the client's pop
 * made marked and not waiting), starting at a member that turns by one per
 * (tenant, queue, group) at each pop, so no member's partitions starve
 * (within a member, the pop already starts at a rotating partition). The
 * first answer with messages is the client's, whole. Only one member ever
 * takes for a pop, so nothing is taken for an answer nobody gets. When the
 * turn starts at this broker and it has something, the pop is served here
 * at once (routing.c), on a single broker's path.
 *
 * A pop that waits and finds nothing parks a "notify" at every member: a
 * marked pop (notify=true) that parks on the queue's gate there like a
 * local pop naming no partition, but answers "ready" without taking when a
 * push (to any partition the member owns) makes something deliverable. On
 * the first ready the others are cancelled (they took nothing), and the
 * edge takes from that member; an empty take (another consumer won the
 * race) parks the notifies again until the pop's deadline.
 *
 * commitOnDelivery (autoAck): a member's take is sent without it (its
 * messages are leased), and the edge acks their ids at that member once it
 * has written the client's answer. A client that leaves before that
 * leaves leases that expire: the messages are redelivered, never lost.
 *
 * At a member, a marked pop naming no partition is served there from what
 * it holds, never sent on: a take that finds nothing is answered empty
 * and makes nothing (no queue, no group), and a notify parks. */
#ifndef EPHD_WHOLE_POP_H
#define EPHD_WHOLE_POP_H

#include <stddef.h>

#include "ffi.h"
#include "placement.h"

/* The client's pop req naming no partition, in a view of several members,
 * with a cell token: EPHD_OK to serve it here (this broker's turn, and it
 * has something), else EPHD_RELAYED (held, answered later). */
int ephd_whole_pop(const ephd_request_t *req, const ephd_view_t *view,
                   const char *tenant, size_t tenant_len);

#endif
