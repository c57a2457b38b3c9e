/* HTTP/1.1 over libuv with llhttp: connections, keep-alive, pipelining in
 * order, body and header limits, the response writer, and parking a
 * connection while its long poll waits. One request per connection is in
 * flight at a time, which is what keeps pipelined answers in order. */
#ifndef EPHD_HTTP_H
#define EPHD_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "errors.h"
#include "ffi.h"
#include "gate.h"

typedef struct ephd_conn ephd_conn_t;

typedef void (*ephd_http_dispatch_cb)(const ephd_request_t *req);

typedef struct {
  size_t max_body_bytes;
  size_t max_header_bytes;
  uint64_t idle_timeout_ms;   /* no request in progress */
  uint64_t header_timeout_ms; /* a request's first byte to its headers */
  uint64_t body_timeout_ms;   /* its headers to its last body byte */
  size_t max_unwritten_bytes; /* a connection's answers before it waits */
} ephd_http_limits_t;

int ephd_http_start(uv_loop_t *loop, const char *host, int port,
                    const ephd_http_limits_t *limits,
                    ephd_http_dispatch_cb dispatch, char *err, size_t errlen);
/* Stops accepting, answers parked polls with an empty batch, and closes every
 * connection once its answers are written. */
void ephd_http_stop(void);
/* Closes what is still open, written or not: the last step of a shutdown. */
void ephd_http_abort(void);

ephd_conn_t *ephd_http_conn(const ephd_request_t *req);
/* Starts a response on c and returns the buffer its body is appended to;
 * ephd_http_end fills in its Content-Length and sends it. */
ephd_buf_t *ephd_http_begin(ephd_conn_t *c, int status, const char *extra);
/* The same with another Content-Type (the metrics' text). */
ephd_buf_t *ephd_http_begin_as(ephd_conn_t *c, int status, const char *extra,
                               const char *content_type);
void ephd_http_end(ephd_conn_t *c);
/* A whole {"error", "code"} answer, with the code's status. */
void ephd_http_refuse(ephd_conn_t *c, ephd_code_t code, const char *message);
/* Marks the current request as parked and hands out the connection's waiter;
 * the connection reads nothing further until it is answered. */
ephd_waiter_t *ephd_http_park(ephd_conn_t *c);
ephd_conn_t *ephd_http_waiter_conn(ephd_waiter_t *w);
/* Parks the current request while work elsewhere (a database write) runs.
 * If the client goes first, *slot is set to NULL so the work does not
 * answer a freed connection; unhold forgets slot before answering. */
void ephd_http_hold(ephd_conn_t *c, ephd_conn_t **slot);
void ephd_http_unhold(ephd_conn_t *c);
size_t ephd_http_connections(void);
/* The port the listener is bound to (the chosen one when started on 0). */
int ephd_http_port(void);
/* Requests dispatched plus connections closed, ever: how main tells a busy
 * spell from a quiet one. */
uint64_t ephd_http_activity(void);

#endif
