/* The cell's membership: this broker's row in queen.ephemeral_members,
 * heartbeated over the declaration store's connection (core/pg.c), and the
 * view of the live members that placement decides over, rebuilt from each
 * heartbeat's read. Liveness is judged by the database's clock, so the
 * brokers' clocks need not agree. Without a database the view is this
 * broker alone, for good: a cell of one, where nothing is hashed.
 *
 * A heartbeat that fails keeps the view it had; past the TTL without one
 * the view is marked stale and still kept, because the database going away
 * is far more often the whole cell's outage than one broker's: every
 * broker keeping the same last view keeps them agreeing, and the hot verbs
 * serving, as with no database at all (docs/cell.md). */
#ifndef EPHD_MEMBERS_H
#define EPHD_MEMBERS_H

#include <stdint.h>
#include <uv.h>

#include "engine.h"
#include "placement.h"

/* Draws this incarnation's id and, with a database, starts heartbeating
 * every min(1 s, ttl / 4). The engine is read for the cell's status. With
 * a cell token (which must outlive the broker) the row is signed with it,
 * and a row not signed with it is no member. */
void ephd_members_start(uv_loop_t *loop, ephd_engine_t *engine, uint32_t epoch,
                        const char *advertise, int database, uint64_t ttl_ms,
                        const char *cell_token);
/* With the database connected, beats now and runs the loop until the read
 * is in (or timeout_ms passed), so the broker starts serving knowing its
 * cell. */
void ephd_members_boot(uint64_t timeout_ms);
/* The live members, sorted by id; this broker is always one of them. Valid
 * until the next heartbeat's read is applied (a later turn of the loop). */
const ephd_view_t *ephd_members_view(void);
/* The view's version: a hash of its members (ids, epochs and addresses,
 * in order), so it changes whenever the view does, and brokers holding
 * the same view show the same one. A client routing to owners compares
 * it; it is no order (docs/cell.md, "Routing to the owner"). */
uint64_t ephd_members_version(void);
/* The member of id whose row the last read found live and signed, not
 * leaving, whether or not it is in the view yet (it may not have answered
 * a probe): where a member's owner_moved says a partition is now
 * (relay_edge.h). NULL when there is none, or it is this broker. */
const ephd_member_t *ephd_members_live(uint64_t id);
/* A count of the views that took in a member: it moves on at each read
 * that adds one (a join, a restart, a member answering its first probe),
 * never goes back, and starts above 0. What a member learnt from this
 * broker before it joined, it learns again (core/cell/groups.h). */
uint64_t ephd_members_joins(void);
/* The stop's first step: tells every other live member that this broker
 * leaves (POST /api/v1/ephemeral/leaving, forward-marked), so they stop
 * placing anything on it at once, and stops answering ready; calls done
 * once each answered or timeout_ms passed. When this broker told a member
 * that stops that it stays, it first waits (listening) until that
 * member's row is gone, at most wait_ms. done may be called before this
 * returns. */
void ephd_members_announce(uint64_t wait_ms, uint64_t timeout_ms,
                           void (*done)(void));
/* After the announce: this broker and the members that answered it as
 * staying (reached, and not stopping too), sorted by id; the view where
 * nothing was announced. What a stop hands its partitions over to. */
const ephd_view_t *ephd_members_staying(void);
/* Stops heartbeating and deletes this broker's row, so the others stop
 * counting it at their next read rather than after the TTL; calls done once
 * the row is gone, the delete failed, or timeout_ms passed. done may be
 * called before this returns (no database). */
void ephd_members_leave(uint64_t timeout_ms, void (*done)(void));
/* fn is called after each read that changed the view's members (not after
 * one that only refreshed them), with the old members (nwas, sorted by id)
 * and the new view. */
void ephd_members_on_change(void (*fn)(const ephd_member_t *was, uint32_t nwas,
                                       const ephd_view_t *view));
/* Frees the view, once the loop has stopped. */
void ephd_members_close(void);

#endif
