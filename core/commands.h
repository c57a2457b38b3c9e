/* The commands behind the FFI: push and ack (commands.c), pop and its long
 * poll (pop.c), and the status reads (status.c). Each takes what its parse
 * left in the request's operation (op.h), acts on the engine, and writes
 * its answer straight into the connection, so payload bytes never pass
 * through Lua. Configure and delete are the store's (store.c): they write
 * the database first. */
#ifndef EPHD_COMMANDS_H
#define EPHD_COMMANDS_H

#include "engine.h"

/* The one engine the commands act on, set once at boot. */
void ephd_commands_init(ephd_engine_t *engine);
extern ephd_engine_t *ephd_commands_engine;

#endif
