/* HTTP/1.1 over libuv with llhttp: connections, keep-alive, pipelining in
 * order, body and header limits, the response writer, and holding a
 * request to answer it later. One request per connection is in flight at a
 * time, which is what keeps pipelined answers in order. The transport knows
 * nothing of what requests mean: it calls out through the handlers given
 * at start. */
#ifndef EPHD_HTTP_H
#define EPHD_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "errors.h"
#include "ffi.h"

typedef struct ephd_conn ephd_conn_t;

/* What the transport calls out to, set at start. */
typedef struct {
  /* A complete request: answer it, hold it, or leave it to the transport's
   * 503. It may attach its own state to req->op. */
  void (*dispatch)(ephd_request_t *req);
  /* Every answer as it is made, the transport's own (route 0) included:
   * the route the request was tagged with, its status, its error code
   * (EPHD_CODE_COUNT for an answer that is no error), and the nanoseconds
   * from its last byte to its answer. NULL: nobody counts. */
  void (*answered)(int route, int status, int code, uint64_t ns);
  /* A dispatched request is done with: answered, or its client gone
   * before it was. What dispatch attached may go. */
  void (*finished)(ephd_request_t *req);
} ephd_http_handlers_t;

typedef struct {
  size_t max_body_bytes;
  size_t max_header_bytes;
  uint64_t idle_timeout_ms;   /* no request in progress */
  uint64_t header_timeout_ms; /* a request's first byte to its headers */
  uint64_t body_timeout_ms;   /* its headers to its last body byte */
  size_t max_unwritten_bytes; /* a connection's answers before it waits */
  size_t max_client_bytes;    /* every connection's buffers together */
  int log_refusals; /* log the transport's own refusals (a 413, a 408) */
} ephd_http_limits_t;

int ephd_http_start(uv_loop_t *loop, const char *host, int port,
                    const ephd_http_limits_t *limits,
                    const ephd_http_handlers_t *handlers, char *err,
                    size_t errlen);
/* Stops accepting, tells each held request's owner (ops->stop: a parked
 * poll answers an empty batch now, a relay may go on until its owner
 * answers) or cuts it off (a database write, with no stop), and closes
 * every connection once its answers are written. */
void ephd_http_stop(void);
/* Closes every connection not held, written or not: a shutdown's step
 * for clients that do not read their answers. Returns how many held
 * requests are left, which close once answered. */
size_t ephd_http_abort(void);

ephd_conn_t *ephd_http_conn(const ephd_request_t *req);
/* Whether req came on a connection a member of the cell opened a session
 * on (core/cell/mark.h), and, once its session header is verified, that
 * it did: the connection's later requests are the member's too. */
int ephd_http_peer(const ephd_request_t *req);
void ephd_http_trust_peer(const ephd_request_t *req);
/* req's X-Queen-Scan header (empty when absent): believed only once its
 * forward mark is (core/scan.h). */
ephd_slice_t ephd_http_scan_frame(const ephd_request_t *req);
/* Starts a response on c and returns the buffer its body is appended to;
 * ephd_http_end fills in its Content-Length and sends it. */
ephd_buf_t *ephd_http_begin(ephd_conn_t *c, int status, const char *extra);
/* The same with another Content-Type (the metrics' text). */
ephd_buf_t *ephd_http_begin_as(ephd_conn_t *c, int status, const char *extra,
                               const char *content_type);
void ephd_http_end(ephd_conn_t *c);
/* A whole {"error", "code"} answer, with the code's status. */
void ephd_http_refuse(ephd_conn_t *c, ephd_code_t code, const char *message);
/* Begins an error answer of code (its status, unless the HTTP layer's own
 * refusals give theirs): the answered handler is told the code. The body
 * is the caller's to write (ephd_error_write). */
ephd_buf_t *ephd_http_begin_error(ephd_conn_t *c, ephd_code_t code, int status,
                                  const char *extra);

/* --- answering later -------------------------------------------------------
 * A request may be held past its dispatch and answered later by anything (a
 * push that wakes a long poll, a database write, a policy reload, a relay),
 * after any number of requests on other connections were dispatched
 * meanwhile. Its connection parses nothing further until it is answered,
 * and reads on, so a client that leaves is seen at once. The request's
 * slices are valid only during its dispatch (copy what the answer needs);
 * its operation (req->op) until it is answered. */
typedef struct ephd_deferred ephd_deferred_t;

typedef struct {
  /* The deadline set with ephd_deferred_deadline passed: answer now (or
   * set another). NULL: none is ever set. */
  void (*deadline)(void *data);
  /* The client left first: the handle is gone once this returns. */
  void (*cancel)(void *data);
  /* The broker is stopping: answer now, and the connection closes once it
   * is written. NULL: the request is cut off (cancel runs). */
  void (*stop)(void *data);
  /* The turn asked for with ephd_deferred_turn came. NULL: none is ever
   * asked for. */
  void (*turn)(void *data);
} ephd_deferred_ops_t;

/* Holds the request being dispatched: ops and data say what to do when
 * its deadline passes, its client leaves or the broker stops. */
ephd_deferred_t *ephd_http_defer(const ephd_request_t *req,
                                 const ephd_deferred_ops_t *ops, void *data);
/* When ops->deadline answers the request, in the loop's milliseconds
 * (ephd_ffi_now_ms); may be moved earlier or later. */
void ephd_deferred_deadline(ephd_deferred_t *d, uint64_t at_ms);
/* Asks for ops->turn on a later loop turn: held requests that asked take
 * one turn each per loop turn, in the order they asked, so an answer too
 * long to make at once is made a slice a turn while the loop serves
 * everyone else between its slices. */
void ephd_deferred_turn(ephd_deferred_t *d);
/* What the holder keeps for the held request (a long list's copy of its
 * names): counted as the connection's own bytes until the answer ends, so
 * QUEEN_EPHEMERAL_MAX_CLIENT_BYTES bounds it as it bounds the buffers, and
 * a client that takes nothing is the first closed when that is past. */
void ephd_deferred_account(ephd_deferred_t *d, size_t bytes);
/* An answer sent as it is made, for one too long to make at once: its
 * status and headers, then its body a chunk at a time, each chunk made in
 * a turn (ephd_deferred_turn, which then waits until the client has taken
 * what was sent), then its end, which ends the hold. JSON, 200-like: a
 * refusal is never streamed. */
void ephd_deferred_stream(ephd_deferred_t *d, int status);
void ephd_deferred_chunk(ephd_deferred_t *d, const char *bytes, size_t len);
void ephd_deferred_stream_end(ephd_deferred_t *d);
/* Where the answer goes (ephd_http_begin ... ephd_http_end). The answer
 * ends the hold, and the handle with it. */
ephd_conn_t *ephd_deferred_conn(ephd_deferred_t *d);

size_t ephd_http_connections(void);
/* What every connection's buffers hold now, and how many connections were
 * closed for holding the most while that was past max_client_bytes. */
size_t ephd_http_client_bytes(void);
uint64_t ephd_http_evicted(void);
/* The port the listener is bound to (the chosen one when started on 0). */
int ephd_http_port(void);
/* Requests dispatched plus connections closed, ever: how main tells a busy
 * spell from a quiet one. */
uint64_t ephd_http_activity(void);

#endif
