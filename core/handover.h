/* Ownership moves: what this broker does with the partitions it holds
 * when they become another member's (docs/cell.md, "Moves").
 *
 * A planned move hands each partition over before letting go: a member
 * joined and placement gives it partitions this broker owned, or this
 * broker stops (SIGTERM). Each partition is written out (transfer.h) and
 * emptied here at once, fenced so the ids this copy delivered answer
 * stale, then sent to its new owner over the relay's pooled connections
 * with the forward mark, to POST /api/v1/ephemeral/handover, where it is
 * charged like a push and merged (ephd_engine_accept). From that moment
 * this broker holds nothing of it: its view relays the partition's pushes
 * and pops to the new owner, which serves what it has and merges the rest
 * as it arrives, giving no group anything twice.
 *
 * An unplanned move (the view changed and a partition held here is
 * another member's, not by a join this broker saw, or left over from an
 * earlier disagreement of views) empties the partition here: the loss
 * contract. So does a hand-over that cannot be made within its bounds
 * (the move's time, its bytes, the peer's answer). Both are counted in
 * queen_ephemeral_wipes_total and logged with their counts.
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
  uint64_t timeout_ms;     /* a move's hand-overs are answered within this */
  uint64_t max_bytes;      /* a move hands over at most this much, in bodies */
  uint64_t max_body_bytes; /* one partition's body (the peers' body limit) */
} ephd_handover_limits_t;

/* cell_token NULL: this broker never relays, so it never moves. */
void ephd_handover_init(uv_loop_t *loop, ephd_engine_t *engine,
                        const char *cell_token,
                        const ephd_handover_limits_t *limits);
/* The view's members changed from was (nwas, sorted by id; this broker
 * among them) to view: every partition held here that view gives to
 * another member moves away, handed over when a member that joined takes
 * it from this broker, emptied otherwise. */
void ephd_handover_view_changed(const ephd_member_t *was, uint32_t nwas,
                                const ephd_view_t *view);
/* This broker stops: every partition it holds goes to its owner in the
 * view without it; done runs once every hand-over is answered or the
 * timeout passed (at once when there is nothing to hand over). */
void ephd_handover_leave(const ephd_view_t *view, void (*done)(void));
/* queen_ephemeral_wipes_total and queen_ephemeral_handed_over_total. */
void ephd_handover_metrics(ephd_buf_t *o);

#endif
