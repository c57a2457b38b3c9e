/* Ownership moves: what this broker does with the partitions it holds
 * when a new view of the cell gives them to another member.
 *
 * A move this broker did not plan empties the partition here (the loss
 * contract): the messages, leases and redeliveries are dropped, counted in
 * queen_ephemeral_wipes_total with one log line per view change, and the
 * ids this copy delivered answer stale from then on (engine.h,
 * ephd_engine_wipe). The new owner starts the partition empty.
 *
 * Nothing here runs in a cell of one, nor without a cell token: a broker
 * that never relays serves whatever it is sent from its own memory, so no
 * partition it holds is anybody else's to serve. */
#ifndef EPHD_HANDOVER_H
#define EPHD_HANDOVER_H

#include <stdint.h>

#include "buf.h"
#include "engine.h"
#include "placement.h"

/* enabled: this broker has a cell token (it relays, so it moves). */
void ephd_handover_init(ephd_engine_t *engine, int enabled);
/* The view's members changed: every partition held here that view gives
 * to another member moves away. */
void ephd_handover_view_changed(const ephd_view_t *view);
/* queen_ephemeral_wipes_total, for /metrics. */
void ephd_handover_metrics(ephd_buf_t *o);

#endif
