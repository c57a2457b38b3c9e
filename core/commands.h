/* The commands behind the FFI: push and ack (commands.c), pop and its long
 * poll (pop.c), and the status reads (status.c). Each takes what its parse
 * left in the request's operation (op.h), acts on the engine, and writes
 * its answer straight into the connection, so payload bytes never pass
 * through Lua. Configure and delete are the store's (store.c): they write
 * the database first.
 *
 * They serve what reaches them, here, and know nothing of the cell: which
 * broker serves a request is decided before its commit runs
 * (core/cell/routing.h), which asks the questions below of this broker. */
#ifndef EPHD_COMMANDS_H
#define EPHD_COMMANDS_H

#include "engine.h"
#include "ffi.h"
#include "op.h"

/* The one engine the commands act on, set once at boot. */
void ephd_commands_init(ephd_engine_t *engine);
extern ephd_engine_t *ephd_commands_engine;

/* Whether a pop naming no partition would deliver something now from what
 * this broker holds, making nothing. */
int ephd_pop_finds_here(const ephd_pop_args_t *a, const char *tenant,
                        size_t tenant_len);

/* Whether this broker's copy of a pop's queue knows the pop's group (queue
 * mode's cursor for none): a group it has not seen is announced to the
 * cell before the pop is served (core/cell/groups.h). */
int ephd_pop_knows_group(const ephd_pop_args_t *a, const char *tenant,
                         size_t tenant_len);

/* A hash of a pop's (tenant, queue, group), the queue mode's group as
 * empty: what the cell keeps per group of a queue is found by it. */
uint64_t ephd_pop_group_hash(const char *tenant, size_t tenant_len,
                             const ephd_pop_args_t *a);

/* Answers a pop of queue on c with an empty batch, making nothing: a take
 * that finds nothing, a relayed wait cut short by a stop. */
void ephd_pop_answer_empty(ephd_conn_t *c, const char *queue, size_t len);

/* An ack's ids settled here one by one, for an ack whose ids several
 * members hold: init with the request's scan, then ephd_ack_here(a, i) for
 * each id i this broker holds (the queue is found at the first). */
typedef struct {
  const ephd_scan_t *scan;
  const char *tenant;
  size_t tenant_len;
  const ephd_ack_item_t *acks;
  const char *ids;
  int found;
  ephd_queue_t *q;
  uint32_t g;
  uint64_t now;
} ephd_ack_here_t;
void ephd_ack_here_init(ephd_ack_here_t *a, const ephd_request_t *req,
                        const char *tenant, size_t tenant_len);
ephd_outcome_t ephd_ack_here(void *data, uint32_t i);

#endif
