/* The client of a peer: HTTP/1.1 requests from this broker to another
 * broker of the cell over pooled keep-alive connections on the libuv loop. No
 * thread per request and nothing that blocks: a request is bytes written
 * from its own buffer, an answer is read whole by a plain reader when it
 * is plain (peer_answer.h) and by llhttp as it arrives otherwise, and a
 * deadline ends whatever is left of it.
 *
 * Each peer (an address) has its own pool with three lanes, so a relayed
 * long poll never stands in front of a push:
 *  - pipelined requests (a push, an ack: those the asker gives a key) go
 *    on one of `pipes` connections of the peer, chosen by key (a
 *    partition's hash, so a partition's requests stay in order), many at
 *    once: the requests queued on a pipe go in one write once a loop turn
 *    relays nothing more (at most eight turns; 64 requests at once), and
 *    the answers are read back in order;
 *  - short requests (a pop that will not wait, and anything without a
 *    key) hold at most max_conns connections of the peer at once, one
 *    request each (a pop's answer may be large: it must not hold a line);
 *  - parking requests (a wait=true pop, which the owner may hold for its
 *    whole timeout) hold at most max_parked, counted apart, one each, and
 *    one share of them (a tenant's) at most max_parked_share.
 * An idle connection serves either of the last two; a request that finds
 * its lane full waits in that lane's FIFO, at most max_queued deep, and
 * past that is refused at once. The pipes of a peer hold at most
 * max_conns + max_queued requests.
 *
 * What a lost connection does to the requests on it:
 *  - one never written (queued, or on a pipe waiting for its write) is
 *    written on a fresh connection: the peer never saw a byte of it;
 *  - one written, on a connection that had been idle and has not sent a
 *    byte since (the peer closed it as idle while the requests were on
 *    their way, so it read none of them), is written once more on a fresh
 *    connection; see peer_client.c for why this is safe;
 *  - any other written request fails (`closed`, or `answer_timeout` when
 *    the oldest answer on its connection is past its deadline): the peer
 *    may have read and applied it, and a push must not be applied twice.
 * A request cancelled once written stays on its pipe until its answer is
 * read and dropped (the answers behind it are still wanted); a borrowed
 * body still being written is lent until the write ends (the request's
 * release), or, without a release, its connection is dropped, as above
 * but with nothing written again (the drop is ours, not the peer's idle
 * close). So is the connection of a request answered before all its bytes
 * were written, before its callback runs.
 *
 * The module is one per process (as http.c): ephd_peer_init, then peers
 * and requests, then ephd_peer_close_all at shutdown. */
#ifndef EPHD_PEER_CLIENT_H
#define EPHD_PEER_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "ffi.h"

/* Why a request failed: the callback's result, or ephd_peer_send's. */
enum {
  EPHD_PEER_OK = 0,
  EPHD_PEER_E_CONNECT = -1,         /* refused or unreachable */
  EPHD_PEER_E_RESOLVE = -2,         /* the peer's name did not resolve */
  EPHD_PEER_E_QUEUE_TIMEOUT = -3,   /* deadline: still waiting for a slot */
  EPHD_PEER_E_CONNECT_TIMEOUT = -4, /* deadline: still connecting */
  EPHD_PEER_E_ANSWER_TIMEOUT = -5,  /* deadline: sent, no whole answer */
  EPHD_PEER_E_CLOSED = -6,          /* reset or closed before a whole answer */
  EPHD_PEER_E_MALFORMED = -7,       /* not an HTTP/1.x response */
  EPHD_PEER_E_TOO_LARGE = -8,       /* headers or body past the limits */
  EPHD_PEER_E_QUEUE_FULL = -9,      /* refused by send: the lane's FIFO */
  EPHD_PEER_E_STOPPING = -10,       /* close_all, or send after it */
  EPHD_PEER_E_INVALID = -11,    /* refused by send: bad arguments, no memory */
  EPHD_PEER_E_PEER_BYTES = -12, /* refused by send: max_peer_bytes */
  EPHD_PEER_E_SHARE = -13       /* refused by send: max_parked_share */
};
#define EPHD_PEER_NKINDS 14 /* OK and every -kind above */

typedef struct {
  uint32_t max_conns;  /* short requests in flight, per peer */
  uint32_t max_parked; /* parking requests in flight, per peer */
  uint32_t max_queued; /* requests waiting, per peer and lane */
  /* Parking requests of one share (a tenant) per peer, in flight and
   * waiting: one tenant's long polls cannot take the lane from the rest. */
  uint32_t max_parked_share;
  uint32_t max_idle;         /* idle connections kept, per peer */
  uint32_t pipes;            /* pipelined connections, per peer (1-16) */
  uint64_t idle_timeout_ms;  /* an idle connection is closed after this */
  uint64_t resolve_ttl_ms;   /* a peer's name is resolved again after this */
  size_t max_header_bytes;   /* status line and headers of a response */
  size_t max_response_bytes; /* its body, after chunked decoding */
  /* The bytes of the requests a peer has not answered yet (waiting, and
   * in flight), so a slow peer cannot hold more than this of the
   * broker's memory; one request is always taken. 0: no bound. */
  size_t max_peer_bytes;
} ephd_peer_limits_t;

/* The defaults: a short lane wide enough for a loop's worth of relayed
 * pushes, a parking lane sized for many parked pops (each costs a socket
 * on both brokers), an idle timeout well under the server's default 300 s
 * (so we, not the peer, close idle connections, which keeps the race the
 * retry covers rare), and the server's own default body and header
 * limits (QUEEN_EPHEMERAL_MAX_BODY_BYTES, QUEEN_EPHEMERAL_MAX_HEADER_BYTES):
 * a peer answers at most what it would accept. The broker takes them from
 * its knobs (QUEEN_EPHEMERAL_RELAY_*, whose defaults these are, and those
 * two); the tests and fuzzers from here. */
#define EPHD_PEER_LIMITS_DEFAULT                                             \
  {                                                                          \
    .max_conns = 64, .max_parked = 4096, .max_queued = 1024, .max_idle = 64, \
    .max_parked_share = 1024, .pipes = 4, .idle_timeout_ms = 60000,          \
    .resolve_ttl_ms = 30000, .max_header_bytes = 65536,                      \
    .max_response_bytes = 67108864, .max_peer_bytes = 134217728              \
  }

typedef struct ephd_peer ephd_peer_t;
typedef struct ephd_peer_call ephd_peer_call_t;

/* One request. method and target are sent as given; headers is a block of
 * whole "Name: value\r\n" lines added after Host and Content-Length (which
 * the relay writes); body may be empty. Everything is copied once, into
 * the request's own buffer, before send returns, except a borrowed body:
 * that one is written from where it is, and must stay there until the
 * callback runs or the request is cancelled (a relayed push is held by
 * its edge anyway: a copy here doubled what a slow owner cost). */
typedef struct {
  ephd_slice_t method;
  ephd_slice_t target; /* origin form: /path?query */
  ephd_slice_t headers;
  ephd_slice_t body;
  uint64_t timeout_ms; /* from send to the whole answer; at least 1 */
  int parks;           /* the peer may hold it: the parking lane */
  int borrows;         /* the body is the caller's, not copied */
  /* Told the bytes the answer's buffer holds each time they change while
   * it is read, so the asker can count them as its own (the client budget
   * counts a relayed answer before it is passed back). NULL: nobody is. */
  void (*answer_bytes)(void *data, size_t bytes);
  /* Not 0: pipelined on the pipe this chooses, in order with the other
   * requests of the same key (a push or an ack: its partition's hash).
   * Only for requests answered at once, with small answers. */
  uint32_t key;
  /* A parking request's share (its tenant, as any tag but 0): a share
   * holds at most max_parked_share of the peer's parking lane. 0: none. */
  uint64_t share;
  /* With a borrowed body: a cancel that finds it still being written on a
   * pipe lends it (ephd_peer_cancel returns 1) and this gives it back,
   * with the callback's data, once the write is over. NULL: such a cancel
   * ends the connection, failing the requests written on it. */
  void (*release)(void *data);
} ephd_peer_request_t;

/* The peer's answer; every slice points into the relay's buffer and lives
 * only during the callback. A header absent is an empty slice. */
typedef struct {
  int status;
  ephd_slice_t content_type;
  ephd_slice_t retry_after;
  ephd_slice_t owner; /* X-Queen-Owner: a member's owner_moved (relay_edge.h) */
  ephd_slice_t body;
} ephd_peer_response_t;

/* Called exactly once per request sent and not cancelled: result is
 * EPHD_PEER_OK with res, or a negative EPHD_PEER_E_* with res NULL.
 * Never called from inside ephd_peer_send or ephd_peer_cancel. The
 * handle is gone once it returns. */
typedef void (*ephd_peer_cb)(void *data, int result,
                             const ephd_peer_response_t *res);

/* The latency histogram's upper bounds, in nanoseconds, and +Inf after
 * them: fixed, so it stays the same size whatever the traffic. From a
 * loopback push (well under a millisecond) to a relayed long poll. */
#define EPHD_PEER_LATENCY_BUCKETS 13
extern const uint64_t ephd_peer_latency_bounds_ns[EPHD_PEER_LATENCY_BUCKETS];

typedef struct {
  uint64_t requests;                   /* accepted by send */
  uint64_t responses;                  /* whole answers delivered */
  uint64_t failures[EPHD_PEER_NKINDS]; /* callbacks' and send's, by -kind */
  uint64_t retries;                    /* sent again on a fresh connection */
  uint64_t pipelined;                  /* requests sent on a pipe */
  uint64_t pipe_writes;                /* the writes that carried them */
  uint64_t cancelled;
  uint64_t connections_opened;
  uint64_t connections_open; /* now: connecting, busy and idle */
  uint64_t in_flight;        /* now: requests holding a connection */
  uint64_t queued;           /* now: requests waiting for one */
  uint64_t bytes;            /* now: the bytes of requests not answered */
  uint64_t latency_ns_sum;   /* send (a pipe's: its write) to answer */
  uint64_t latency_count;
  /* The responses by latency: [i] those within bound i and above bound
   * i - 1 (not cumulative), the last those above every bound. */
  uint64_t latency_buckets[EPHD_PEER_LATENCY_BUCKETS + 1];
} ephd_peer_stats_t;

/* Starts (or, after close_all and the loop has closed its handles,
 * restarts) the module with a copy of limits. */
void ephd_peer_init(uv_loop_t *loop, const ephd_peer_limits_t *limits);
/* The pool of "host:port" ("http://" and a trailing "/" are allowed, an
 * IPv6 literal in brackets), found or made. An IP literal is used as is;
 * a name is resolved off the loop (uv_getaddrinfo) when a connection is
 * first needed, and again after resolve_ttl_ms. NULL when the address
 * does not parse, or while stopping. Peers live until close_all. */
ephd_peer_t *ephd_peer(const char *address);
/* Queues req to peer; 0 and *out set, or a negative kind (QUEUE_FULL,
 * SHARE, PEER_BYTES, STOPPING, INVALID) and cb is never called. */
int ephd_peer_send(ephd_peer_t *peer, const ephd_peer_request_t *req,
                   ephd_peer_cb cb, void *data, ephd_peer_call_t **out);
/* A callback for a request whose answer nobody reads (an ack sent and
 * forgotten, an announcement): its failure leaves what the protocol
 * already covers (a lease expires, a group is announced again). */
void ephd_peer_ignore(void *data, int result, const ephd_peer_response_t *res);
/* The asker went away: cb will not be called. A queued request is dropped;
 * one in flight on a connection of its own closes it (its answer could not
 * be told from the next one's); one written on a pipe has its answer read
 * and dropped. Only for a handle whose callback has not run. A borrowed
 * body is not read once this returns 0; on 1 it is still being written,
 * and the request's release gives it back (never from inside this). */
int ephd_peer_cancel(ephd_peer_call_t *r);
/* The longest line ephd_peer_session may ask for. */
#define EPHD_PEER_SESSION_MAX 160
/* write(out, authority) writes len bytes (at most EPHD_PEER_SESSION_MAX),
 * a header line with its "\r\n", that the first request of every
 * connection carries among its headers, written as it is sent, for the
 * peer at authority (its host:port, as in Host): a cell's peer session
 * (core/cell/mark.h). NULL: none. */
void ephd_peer_session(void (*write)(char *out, const char *authority),
                       size_t len);
/* done is called, from a timer of its own, once no request is queued or
 * in flight (on the next turn when none is): a stopping broker lets the
 * relays its clients wait on end with their owners' answers, each within
 * its deadline, before it closes its peers. One waiter at a time. */
void ephd_peer_drain(void (*done)(void));
/* The broker stops: every pending request's callback runs now with
 * EPHD_PEER_E_STOPPING, every handle is closed, and later sends are
 * refused, so the loop can end. */
void ephd_peer_close_all(void);
const ephd_peer_stats_t *ephd_peer_stats(void);
/* A kind's name for logs and metrics labels ("connect", "answer_timeout"). */
const char *ephd_peer_kind_name(int kind);

#endif
