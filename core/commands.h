/* The commands behind the FFI: push and ack (commands.c), pop and its long
 * poll (pop.c), and the status reads (status.c). Each takes what its parse
 * left in the request's operation (op.h), acts on the engine, and writes
 * its answer straight into the connection, so payload bytes never pass
 * through Lua. Configure and delete are the store's (store.c): they write
 * the database first. */
#ifndef EPHD_COMMANDS_H
#define EPHD_COMMANDS_H

#include "buf.h"
#include "engine.h"
#include "json.h"

extern const char *const ephd_ack_outcome_names[4];

/* One result of an ack's answer, {"id":"...","outcome":"..."}, after a
 * comma unless first: the answer of an ack served here, and of one split
 * over the cell and merged (forward.c). Inline: it is the ack's loop. */
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

/* The one engine the commands act on, set once at boot. */
void ephd_commands_init(ephd_engine_t *engine);
extern ephd_engine_t *ephd_commands_engine;

#endif
