/* The cell's routing (not the HTTP routes of routes.c): whether a request
 * is served by this broker, or relayed to the member that holds what it
 * names. Decided once per request, after the ladder has
 * passed it and before its verb commits, as Redis decides a cluster
 * redirect once in processCommand and its list commands know nothing of
 * the cluster: the verbs (commands.c, pop.c) serve what reaches them,
 * here, and the ladder asks ephd_ffi_cell_route (ffi.h) before the commit
 * of every handler that declares itself routed (push, pop, ack).
 *
 * What names the holder, per verb:
 *  - push, and a pop naming its partition: the owner placement gives
 *    (tenant, queue, partition) in this broker's view;
 *  - a pop naming none: the whole cell (whole_pop.h), or, a member's take
 *    or notify of one, this broker (a take finding nothing is answered
 *    empty here, making nothing);
 *  - an ack: the incarnations its ids' epochs name (the one that issued an
 *    id holds its message, where hashing would name the owner now, maybe
 *    not the holder); an id of no live member's, or that does not parse,
 *    is settled here (stale or unknown). All of one other member's: the
 *    ack is relayed whole; of several holders: split (relay_edge.h).
 *
 * A request a member relayed here (marked) is served here or, for a
 * partition this view gives another member, refused owner_moved: never
 * sent on. Without a cell token every broker serves what it is sent. In a
 * cell of one the ladder does not ask, unless the request is marked. */
#ifndef EPHD_ROUTING_H
#define EPHD_ROUTING_H

#include "ffi.h"

#endif
