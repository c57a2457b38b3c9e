/* Ownership moves: what this broker does with the partitions it holds
 * when they become another member's (docs/cell.md, "Moves").
 *
 * A partition held rightly is handed over before letting go: this broker
 * owned it among the members still live (a member joined and takes it; one
 * left and another joined in the same read), it adopted it by a hand-over,
 * or it stops (SIGTERM). Each partition is written out (transfer.h) and
 * emptied here at once, fenced so the ids this copy delivered answer
 * stale, then sent to its owner over the relay's pooled connections with
 * the forward mark, to POST /api/v1/ephemeral/handover, where it is
 * charged like a push and merged (ephd_engine_accept). A partition with no
 * message goes too when it knows groups: its new owner must learn them
 * before it frees what they have not read. A failed try is tried again,
 * backing off, until the hand-over's timeout, each try to the owner the
 * view names then (this broker again: kept here); only then is it dropped.
 *
 * The receiver takes it when its own view gives it the partition, or still
 * gives it to the sender (which is giving it up): adopted, and handed on
 * if its view moves it elsewhere. Another owner by its view answers 503
 * owner_moved, and the sender asks its view again at the next try. A
 * broker that takes partitions over (it joined, or a member left) frees
 * nothing of them until their hand-overs came or their time passed
 * (ephd_ring_t's awaiting): the groups they bring may not have read it.
 *
 * Only a copy held without a claim (left over from views that disagreed)
 * is emptied where it is: the loss contract, counted in
 * queen_ephemeral_wipes_total{reason="unplanned"}, as a hand-over dropped
 * is in {reason="handover"}, each logged with their counts.
 *
 * Nothing here runs in a cell of one, nor without a cell token: a broker
 * that never relays serves whatever it is sent from its own memory. */
#ifndef EPHD_HANDOVER_H
#define EPHD_HANDOVER_H

#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "engine.h"
#include "placement.h"

typedef struct {
  uint64_t timeout_ms;     /* a hand-over is tried again until this passed */
  uint64_t max_bytes;      /* a move hands over at most this much, in bodies */
  uint64_t max_body_bytes; /* one partition's body (the peers' body limit) */
} ephd_handover_limits_t;

/* cell_token NULL: this broker never relays, so it never moves. */
void ephd_handover_init(uv_loop_t *loop, ephd_engine_t *engine,
                        const char *cell_token,
                        const ephd_handover_limits_t *limits);
/* The view's members changed from was (nwas, sorted by id; this broker
 * among them) to view: every partition held here that view gives to
 * another member moves away, handed over when held rightly, emptied
 * otherwise; partitions taken over are held until their hand-overs. */
void ephd_handover_view_changed(const ephd_member_t *was, uint32_t nwas,
                                const ephd_view_t *view);
/* This broker stops: every partition it holds goes to its owner in the
 * view without it; done runs once every hand-over is accepted or dropped
 * (at once when there is nothing to hand over). */
void ephd_handover_leave(const ephd_view_t *view, void (*done)(void));
/* The edge is about to relay a request for the partition: its hand-over,
 * if one is queued or waiting to be tried again, is sent now, ahead of
 * the request, past the window and the backoff. Free when no hand-over is
 * under way. */
void ephd_handover_flush(const char *tenant, size_t tenant_len,
                         const char *queue, size_t queue_len,
                         const char *partition, size_t partition_len);
/* queen_ephemeral_wipes_total and queen_ephemeral_handed_over_total. */
void ephd_handover_metrics(ephd_buf_t *o);

#endif
