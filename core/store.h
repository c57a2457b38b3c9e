/* The declaration store: the broker's one durable promise. Creates the
 * tables, loads every declaration at boot, on each reconnection and every
 * refresh, and writes configure and delete, database first and memory
 * second. Push, pop and ack never come here. */
#ifndef EPHD_STORE_H
#define EPHD_STORE_H

#include <stdint.h>
#include <uv.h>

#include "engine.h"

/* Loaded rows are handed to Lua through these callbacks, which read them
 * back with ephd_ffi_store_rows/_row/_grant and apply them (ffi.h). */
typedef void (*ephd_store_apply_cb)(void);

/* url NULL: no database; declarations cannot be made and no grant exists. */
void ephd_store_start(uv_loop_t *loop, ephd_engine_t *engine, const char *url,
                      uint64_t refresh_ms, ephd_store_apply_cb declarations,
                      ephd_store_apply_cb grants);
/* Runs the loop until the first load is applied or the database proved
 * unreachable (or timeout_ms passed); returns 1 if declarations loaded. */
int ephd_store_boot(uint64_t timeout_ms);
void ephd_store_stop(void);

#endif
