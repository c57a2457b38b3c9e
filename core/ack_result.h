/* An ack's results on the wire, [{"id":"...","outcome":"..."}, ...]: what
 * an ack served here writes (commands.c), and what one split over the cell
 * reads back from each holder and merges (relay_edge.c). */
#ifndef EPHD_ACK_RESULT_H
#define EPHD_ACK_RESULT_H

#include "buf.h"
#include "engine.h"
#include "json.h"

extern const char *const ephd_ack_outcome_names[4];

/* One result, after a comma unless first. Inline: it is the ack's loop. */
static inline void ephd_ack_write_result(ephd_buf_t *out, int first,
                                         const char *id, size_t len,
                                         ephd_outcome_t outcome) {
  if (!first) ephd_buf_append(out, ",", 1);
  ephd_buf_appends(out, "{\"id\":");
  ephd_json_write_string(out, id, len);
  ephd_buf_appends(out, ",\"outcome\":\"");
  ephd_buf_appends(out, ephd_ack_outcome_names[outcome]);
  ephd_buf_appends(out, "\"}");
}
/* An outcome read back from its name: 0 and *outcome, or -1. */
int ephd_ack_outcome_named(const char *name, size_t len,
                           ephd_outcome_t *outcome);

#endif
