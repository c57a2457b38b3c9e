/* An asynchronous PostgreSQL client on the libuv loop: one libpq connection
 * in non-blocking mode behind a uv_poll, a FIFO of queries sent one at a
 * time, and reconnection with backoff. Nothing here ever blocks the loop,
 * and nothing on the hot path calls it. */
#ifndef EPHD_PG_H
#define EPHD_PG_H

#include <libpq-fe.h>
#include <uv.h>

/* res is NULL when the query failed (err says why); the client frees res
 * after the callback returns. */
typedef void (*ephd_pg_cb)(void *data, PGresult *res, const char *err);
/* Called each time a connection is (re)established, before any queued
 * query runs: the place to create tables and reload state. */
typedef void (*ephd_pg_connected_cb)(void);
/* Called once per failed connection attempt or lost connection. */
typedef void (*ephd_pg_lost_cb)(const char *why);

void ephd_pg_start(uv_loop_t *loop, const char *url,
                   ephd_pg_connected_cb connected, ephd_pg_lost_cb lost);
int ephd_pg_connected(void);
/* Queues a query with text parameters (copied). Returns -1 without calling
 * cb when there is no connection. */
int ephd_pg_query(const char *sql, int nparams, const char *const *values,
                  const int *lengths, ephd_pg_cb cb, void *data);
/* Fails queued queries and closes the connection. */
void ephd_pg_stop(void);

#endif
