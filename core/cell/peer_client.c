#include "peer_client.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "buf.h"
#include "list.h"
#include "llhttp.h"

/* What an idle connection keeps of its read buffer for the next answer:
 * a relayed push's answer is a few hundred bytes, a pop's may be
 * megabytes, and those are given back once delivered. */
#define IDLE_KEEP_BYTES 16384
/* The addresses of a resolved name tried in turn (localhost may be ::1
 * and 127.0.0.1; the broker may listen on only one). */
#define MAX_ADDRS 4

enum { LANE_SHORT, LANE_PARKS, NLANES };

/* A request is queued (waiting for a slot of its lane), active (holding a
 * slot, and a connection unless between two of them), failing (its
 * failure found inside an API call, told from its timer on the next loop
 * turn so a callback never runs inside send or cancel), or done. */
enum { R_QUEUED, R_ACTIVE, R_FAILING, R_DONE };
enum { C_CONNECTING, C_BUSY, C_IDLE, C_CLOSED };
enum { H_NONE, H_FIELD, H_VALUE };
enum { HDR_CONTENT_TYPE, HDR_RETRY_AFTER, HDR_OWNER, NHDR };

typedef struct {
  size_t off, len;
} span_t;

typedef struct conn conn_t;

struct ephd_peer_call {
  uv_timer_t timer; /* the deadline; at 0 for a failure told later */
  ephd_peer_t *peer;
  conn_t *conn;
  ephd_node_t link; /* in one list of its peer's, by state */
  ephd_peer_cb cb;
  void *data;
  uint64_t sent_ns;
  int lane;
  int state;
  int failure; /* R_FAILING: the kind its timer reports */
  int head;    /* a HEAD request: its answer has no body */
  int retried;
  int addrs_tried;
  void (*answer_bytes)(void *data, size_t bytes);
  size_t head_end;   /* in bytes: where the head's blank line begins */
  size_t answer_cap; /* what answer_bytes was last told */
  size_t total;      /* len and the body's: what the peer's bytes count */
  const char *body;  /* a borrowed body, written after bytes; or NULL */
  size_t body_len;
  size_t len;
  char bytes[]; /* the request as written (its body unless borrowed) */
};

struct conn {
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_write_t write;
  llhttp_t parser;
  ephd_peer_t *peer;
  ephd_peer_call_t *req; /* connecting or busy for it */
  ephd_node_t idle_link; /* in the peer's idle list, newest first */
  ephd_buf_t in;         /* the answer: headers as read, the body compacted */
  uint64_t idle_since;
  int state;
  int addr;      /* which of the peer's addresses */
  uint32_t uses; /* answers it carried */
  int writing;
  int sessioned; /* its first request carried the session line */
  char session[EPHD_PEER_SESSION_MAX];
  int got_bytes; /* of the answer in progress */
  /* The answer being parsed; spans are offsets into in. */
  int hstate;
  span_t field, value, hdr[NHDR];
  size_t header_bytes;
  int headers_done; /* trailers, if any, are only counted */
  size_t keep_end;  /* where the header bytes still needed end */
  int body_started;
  size_t body_off, body_len;
  int complete;
  int keep_alive;
  int failure; /* the kind a callback of ours stopped the parser for */
};

struct ephd_peer {
  ephd_peer_t *next;
  char *authority; /* as given, without scheme: the key and the Host */
  char *name;      /* to resolve; NULL for an IP literal */
  char port[8];
  struct sockaddr_storage addrs[MAX_ADDRS];
  int naddrs;
  int preferred; /* the address the last connection reached */
  uint64_t resolved_ms;
  int resolving;
  uv_getaddrinfo_t gai;
  ephd_list_t queue[NLANES];
  ephd_list_t active;
  ephd_list_t failing;
  uint32_t busy[NLANES];
  size_t bytes;     /* of its requests not done: max_peer_bytes */
  ephd_list_t idle; /* newest first */
  uv_timer_t idle_timer;
  int refs; /* its timer and a resolution in progress */
};

static uv_loop_t *loop;
static ephd_peer_limits_t limits;
static ephd_peer_stats_t stats;
static ephd_peer_t *peers;
static int stopping;
/* Requests sent and not yet ended, and who waits for there to be none
 * (ephd_peer_drain), told from its own timer. */
static uint64_t live;
static void (*drain_done)(void);
static uv_timer_t drain_timer;
static llhttp_settings_t settings;
/* Writes the line that opens a session on a connection (mark.h), or NULL. */
static void (*session_write)(char *out, const char *authority);
static size_t session_len;
/* Where an idle connection reads: anything it gets (bytes, EOF, an
 * error) ends it, so nothing is kept. */
static char idle_scratch[256];

static void pump(ephd_peer_t *p);
static void conn_open(ephd_peer_t *p, ephd_peer_call_t *r);
static void on_request_timer(uv_timer_t *t);

static uint32_t lane_cap(int lane) {
  return lane == LANE_SHORT ? limits.max_conns : limits.max_parked;
}

/* --- connections ---------------------------------------------------- */

static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = h->data;
  ephd_buf_free(&c->in);
  free(c);
}

static conn_t *conn_of(ephd_node_t *n) {
  return EPHD_ENTRY(n, conn_t, idle_link);
}

static ephd_peer_call_t *relay_of(ephd_node_t *n) {
  return EPHD_ENTRY(n, ephd_peer_call_t, link);
}

/* Ends a connection in any state; its request, if any, stays where it is
 * (the caller decides its fate). The write and connect requests libuv
 * still holds come back cancelled before the handle's close callback. */
static int conn_end(conn_t *c) {
  if (c->state == C_CLOSED) return 0;
  if (c->state == C_IDLE) ephd_list_remove(&c->peer->idle, &c->idle_link);
  if (c->req) c->req->conn = NULL;
  c->req = NULL;
  c->state = C_CLOSED;
  stats.connections_open--;
  return 1;
}

static void conn_close(conn_t *c) {
  if (conn_end(c)) uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* Ends a connection whose request is given up before its answer (a
 * cancel, a deadline, a failure) with a reset rather than a FIN: closing
 * first, this broker would hold it in TIME-WAIT for a minute, a local port
 * each, and a cell whose waits are given up at every wake (a pop over the
 * whole cell cancels its other members' notifies) ran out of ports to its
 * members. The peer hears the reset as a client that left. */
static void conn_abort(conn_t *c) {
  if (!conn_end(c)) return;
  /* Refused only for a socket not open yet, or one shut down: closed. */
  if (uv_tcp_close_reset(&c->tcp, on_conn_closed) != 0)
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_idle_timer(uv_timer_t *t) {
  ephd_peer_t *p = t->data;
  uint64_t now = uv_now(loop);
  conn_t *oldest;
  while ((oldest = conn_of(p->idle.tail)) &&
         oldest->idle_since + limits.idle_timeout_ms <= now)
    conn_close(oldest);
  if (oldest)
    uv_timer_start(t, on_idle_timer,
                   oldest->idle_since + limits.idle_timeout_ms - now, 0);
}

/* Newest first: the connections in use stay warm and the rest age out
 * at the tail, which the peer's one timer watches. */
static void conn_idle(conn_t *c) {
  ephd_peer_t *p = c->peer;
  if (p->idle.count >= limits.max_idle) {
    conn_close(c);
    return;
  }
  c->state = C_IDLE;
  c->idle_since = uv_now(loop);
  ephd_list_prepend(&p->idle, &c->idle_link);
  if (!uv_is_active((uv_handle_t *)&p->idle_timer))
    uv_timer_start(&p->idle_timer, on_idle_timer, limits.idle_timeout_ms, 0);
}

/* --- requests ------------------------------------------------------- */

static void on_request_closed(uv_handle_t *h) { free(h->data); }

static void on_drained(uv_timer_t *t) {
  (void)t;
  if (live > 0 || drain_done == NULL) return;
  void (*done)(void) = drain_done;
  drain_done = NULL;
  done();
}

void ephd_peer_session(void (*write)(char *out, const char *authority),
                       size_t len) {
  session_write = len <= EPHD_PEER_SESSION_MAX ? write : NULL;
  session_len = len;
}

void ephd_peer_drain(void (*done)(void)) {
  drain_done = done;
  if (live == 0) uv_timer_start(&drain_timer, on_drained, 0, 0);
}

/* Takes r out of every list and slot it holds and closes its connection
 * (an answer half read is of no use to anyone). */
static void detach(ephd_peer_call_t *r) {
  ephd_peer_t *p = r->peer;
  switch (r->state) {
    case R_QUEUED:
      ephd_list_remove(&p->queue[r->lane], &r->link);
      stats.queued--;
      break;
    case R_ACTIVE:
      ephd_list_remove(&p->active, &r->link);
      p->busy[r->lane]--;
      stats.in_flight--;
      break;
    case R_FAILING:
      ephd_list_remove(&p->failing, &r->link);
      break;
  }
  p->bytes -= r->total;
  stats.bytes -= r->total;
  if (r->conn) conn_abort(r->conn);
  r->state = R_DONE;
  uv_close((uv_handle_t *)&r->timer, on_request_closed);
  /* On a later turn: r's callback has yet to run, and may send again. */
  if (--live == 0 && drain_done) uv_timer_start(&drain_timer, on_drained, 0, 0);
}

#define MS 1000000ull
const uint64_t ephd_peer_latency_bounds_ns[EPHD_PEER_LATENCY_BUCKETS] = {
    MS / 4,  MS / 2,   MS,       5 * MS / 2, 5 * MS,    10 * MS,   25 * MS,
    50 * MS, 100 * MS, 500 * MS, 1000 * MS,  5000 * MS, 30000 * MS};

/* The one way a callback runs: everything is in order first (the slot is
 * free and given to the next request), then the asker hears. */
static void complete(ephd_peer_call_t *r, int kind,
                     const ephd_peer_response_t *res) {
  ephd_peer_t *p = r->peer;
  detach(r);
  if (kind == EPHD_PEER_OK) {
    stats.responses++;
    uint64_t ns = uv_hrtime() - r->sent_ns;
    size_t b = 0;
    while (b < EPHD_PEER_LATENCY_BUCKETS && ns > ephd_peer_latency_bounds_ns[b])
      b++;
    stats.latency_buckets[b]++;
    stats.latency_ns_sum += ns;
    stats.latency_count++;
  } else {
    stats.failures[-kind]++;
  }
  pump(p);
  r->cb(r->data, kind, res);
}

/* A failure found inside an API call (send, cancel, and the pump they
 * run) is told on the next loop turn, from the request's own timer. */
static void fail_soon(ephd_peer_call_t *r, int kind) {
  ephd_peer_t *p = r->peer;
  if (r->conn) conn_abort(r->conn);
  if (r->state == R_QUEUED) {
    ephd_list_remove(&p->queue[r->lane], &r->link);
    stats.queued--;
  } else if (r->state == R_ACTIVE) {
    ephd_list_remove(&p->active, &r->link);
    p->busy[r->lane]--;
    stats.in_flight--;
  }
  r->state = R_FAILING;
  r->failure = kind;
  ephd_list_append(&p->failing, &r->link);
  uv_timer_start(&r->timer, on_request_timer, 0, 0);
}

static void on_request_timer(uv_timer_t *t) {
  ephd_peer_call_t *r = t->data;
  int kind = r->failure;
  if (r->state == R_QUEUED)
    kind = EPHD_PEER_E_QUEUE_TIMEOUT;
  else if (r->state == R_ACTIVE)
    kind = r->conn && r->conn->state == C_BUSY ? EPHD_PEER_E_ANSWER_TIMEOUT
                                               : EPHD_PEER_E_CONNECT_TIMEOUT;
  complete(r, kind, NULL);
}

/* --- resolving ------------------------------------------------------ */

static void peer_release(ephd_peer_t *p) {
  if (--p->refs) return;
  free(p->authority);
  free(p->name);
  free(p);
}

static void on_peer_timer_closed(uv_handle_t *h) { peer_release(h->data); }

static void fail_queued(ephd_peer_t *p, int kind) {
  for (int lane = 0; lane < NLANES; lane++)
    while (p->queue[lane].head) fail_soon(relay_of(p->queue[lane].head), kind);
}

static void on_resolved(uv_getaddrinfo_t *req, int status,
                        struct addrinfo *res) {
  ephd_peer_t *p = req->data;
  p->resolving = 0;
  if (!stopping && status == 0) {
    p->naddrs = 0;
    for (struct addrinfo *a = res; a && p->naddrs < MAX_ADDRS; a = a->ai_next)
      if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
          a->ai_addrlen <= sizeof(p->addrs[0]))
        memcpy(&p->addrs[p->naddrs++], a->ai_addr, a->ai_addrlen);
    p->preferred = 0;
    p->resolved_ms = uv_now(loop);
  }
  uv_freeaddrinfo(res);
  if (!stopping) {
    if (status != 0 || p->naddrs == 0) {
      /* Told on the next turn: a callback that sends again to this name
       * starts a new resolution, not a loop inside this one. */
      p->naddrs = 0;
      fail_queued(p, EPHD_PEER_E_RESOLVE);
    }
    pump(p);
  }
  peer_release(p);
}

/* Whether a new connection can be opened now: a literal always, a name
 * while its resolution is fresh. */
static int addresses_ready(ephd_peer_t *p) {
  if (p->name == NULL) return 1;
  return p->naddrs > 0 && uv_now(loop) < p->resolved_ms + limits.resolve_ttl_ms;
}

static void resolve(ephd_peer_t *p) {
  if (p->resolving) return;
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  p->gai.data = p;
  if (uv_getaddrinfo(loop, &p->gai, on_resolved, p->name, p->port, &hints) <
      0) {
    fail_queued(p, EPHD_PEER_E_RESOLVE);
    return;
  }
  p->resolving = 1;
  p->refs++;
}

/* --- writing and connecting ---------------------------------------- */

static void conn_fail(conn_t *c, int kind);

static void on_write(uv_write_t *w, int status) {
  conn_t *c = w->data;
  c->writing = 0;
  if (c->state == C_BUSY && status < 0) conn_fail(c, EPHD_PEER_E_CLOSED);
}

static void answer_reset(conn_t *c);

static int conn_send(conn_t *c, ephd_peer_call_t *r) {
  c->req = r;
  r->conn = c;
  c->state = C_BUSY;
  llhttp_reset(&c->parser);
  answer_reset(c);
  c->header_bytes = 0;
  c->got_bytes = 0;
  c->in.len = 0;
  uv_buf_t b[4];
  unsigned nb = 0;
  if (session_write && !c->sessioned) {
    /* The connection's first request opens its session: the line goes
     * among its headers, written now, so its time is the sending's. */
    session_write(c->session, r->peer->authority);
    c->sessioned = 1;
    b[nb++] = uv_buf_init(r->bytes, (unsigned)r->head_end);
    b[nb++] = uv_buf_init(c->session, (unsigned)session_len);
    b[nb++] =
        uv_buf_init(r->bytes + r->head_end, (unsigned)(r->len - r->head_end));
  } else {
    b[nb++] = uv_buf_init(r->bytes, (unsigned)r->len);
  }
  if (r->body) b[nb++] = uv_buf_init((char *)r->body, (unsigned)r->body_len);
  c->write.data = c;
  int rc = uv_write(&c->write, (uv_stream_t *)&c->tcp, b, nb, on_write);
  if (rc == 0) c->writing = 1;
  return rc;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn_t *c = h->data;
  (void)suggested;
  if (c->state != C_BUSY) {
    *buf = uv_buf_init(idle_scratch, sizeof(idle_scratch));
    return;
  }
  char *at = ephd_buf_reserve(&c->in, 16384);
  *buf = uv_buf_init(at, (unsigned)(c->in.cap - c->in.len));
  ephd_peer_call_t *r = c->req;
  if (r->answer_bytes && r->answer_cap != c->in.cap) {
    r->answer_cap = c->in.cap;
    r->answer_bytes(r->data, c->in.cap);
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_connect(uv_connect_t *req, int status) {
  conn_t *c = req->data;
  if (c->state == C_CLOSED) return;
  ephd_peer_call_t *r = c->req;
  ephd_peer_t *p = c->peer;
  if (status < 0) {
    conn_close(c);
    /* Another address of the name may be the one the peer listens on. */
    if (++r->addrs_tried < p->naddrs) {
      conn_open(p, r);
      return;
    }
    complete(r, EPHD_PEER_E_CONNECT, NULL);
    return;
  }
  p->preferred = c->addr;
  uv_tcp_nodelay(&c->tcp, 1);
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0 ||
      conn_send(c, r) < 0) {
    conn_close(c);
    complete(r, EPHD_PEER_E_CLOSED, NULL);
  }
}

/* A fresh connection for r; a failure that libuv reports at once is told
 * on the next turn (this runs inside send and cancel). */
static void conn_open(ephd_peer_t *p, ephd_peer_call_t *r) {
  /* A name whose resolution failed since r was given a slot. */
  int naddrs = p->name ? p->naddrs : 1;
  if (naddrs == 0) {
    fail_soon(r, EPHD_PEER_E_RESOLVE);
    return;
  }
  conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    fail_soon(r, EPHD_PEER_E_CONNECT);
    return;
  }
  uv_tcp_init(loop, &c->tcp);
  c->tcp.data = c;
  c->peer = p;
  c->req = r;
  r->conn = c;
  c->state = C_CONNECTING;
  llhttp_init(&c->parser, HTTP_RESPONSE, &settings);
  c->parser.data = c;
  stats.connections_opened++;
  stats.connections_open++;
  c->addr = (p->preferred + r->addrs_tried) % naddrs;
  c->connect.data = c;
  if (uv_tcp_connect(&c->connect, &c->tcp,
                     (const struct sockaddr *)&p->addrs[c->addr],
                     on_connect) < 0)
    fail_soon(r, EPHD_PEER_E_CONNECT);
}

/* The first request of a lane whose deadline has not passed: one whose
 * has is told queue_timeout by its timer later in this turn, and a slot
 * given to it would open a connection only to close it (a crowd timing
 * out together opened one per request to an owner already too slow). */
static ephd_peer_call_t *next_waiting(ephd_list_t *l) {
  ephd_peer_call_t *r = relay_of(l->head);
  while (r && uv_timer_get_due_in(&r->timer) == 0) r = relay_of(r->link.next);
  return r;
}

/* Hands free slots to waiting requests, lane by lane in FIFO order: an
 * idle connection if there is one, else a new one. A parked pop holds a
 * slot of the parking lane only, so pushes never wait behind it. */
static void pump(ephd_peer_t *p) {
  if (stopping) return;
  for (int lane = 0; lane < NLANES; lane++) {
    ephd_peer_call_t *r;
    while (p->busy[lane] < lane_cap(lane) &&
           (r = next_waiting(&p->queue[lane]))) {
      conn_t *c = conn_of(p->idle.head);
      if (c == NULL && !addresses_ready(p)) {
        resolve(p);
        return;
      }
      ephd_list_remove(&p->queue[lane], &r->link);
      stats.queued--;
      r->state = R_ACTIVE;
      ephd_list_append(&p->active, &r->link);
      p->busy[lane]++;
      stats.in_flight++;
      if (c == NULL) {
        conn_open(p, r);
        continue;
      }
      ephd_list_remove(&p->idle, &c->idle_link);
      if (conn_send(c, r) < 0) {
        /* The pooled connection is gone already: nothing was sent. */
        conn_close(c);
        r->retried = 1;
        stats.retries++;
        conn_open(p, r);
      }
    }
  }
}

/* --- answers ------------------------------------------------------- */

/* A request failed on its connection. Sent once more, on a fresh
 * connection, only when the connection had carried answers before and
 * not one byte of this answer came: that is the peer closing a pooled
 * connection it thought idle while our request was on its way, so the
 * peer never read the request. (ephd's server closes a keep-alive
 * connection only while no request is in progress; a peer that died
 * after reading one took its rings with it, so a push sent again to its
 * successor is not a second copy of anything still held.) Never after an
 * answer has begun: the request was read and may have been applied. */
static void conn_fail(conn_t *c, int kind) {
  ephd_peer_call_t *r = c->req;
  int retry =
      kind == EPHD_PEER_E_CLOSED && !c->got_bytes && c->uses > 0 && !r->retried;
  conn_close(c);
  if (retry) {
    r->retried = 1;
    stats.retries++;
    conn_open(r->peer, r);
    return;
  }
  complete(r, kind, NULL);
}

static ephd_slice_t slice_of(const ephd_buf_t *b, span_t s) {
  ephd_slice_t out = {s.len ? b->base + s.off : "", s.len};
  return out;
}

/* The answer is whole: the connection goes back to the pool (or closes)
 * before the callback, so a request sent from it can use it at once; the
 * bytes the callback sees move out of the connection for the call. */
static void deliver(conn_t *c, int reusable) {
  ephd_peer_call_t *r = c->req;
  ephd_buf_t kept = c->in;
  ephd_peer_response_t res;
  res.status = c->parser.status_code;
  res.content_type = slice_of(&kept, c->hdr[HDR_CONTENT_TYPE]);
  res.retry_after = slice_of(&kept, c->hdr[HDR_RETRY_AFTER]);
  res.owner = slice_of(&kept, c->hdr[HDR_OWNER]);
  span_t body = {c->body_off, c->body_started ? c->body_len : 0};
  res.body = slice_of(&kept, body);
  ephd_buf_init(&c->in);
  c->req = NULL;
  r->conn = NULL;
  c->uses++;
  /* An answer that came while the request was still being written, or
   * bytes after it, leave the connection in a state we cannot trust. */
  if (reusable && c->keep_alive && !c->writing && !stopping)
    conn_idle(c);
  else
    conn_close(c);
  complete(r, EPHD_PEER_OK, &res);
  if (c->state != C_CLOSED && c->in.cap == 0) {
    kept.len = 0;
    c->in = kept;
    ephd_buf_shrink(&c->in, IDLE_KEEP_BYTES);
  } else {
    ephd_buf_free(&kept);
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = s->data;
  (void)buf;
  if (nread == 0 || c->state == C_CLOSED) return;
  if (c->state != C_BUSY) {
    /* A pooled connection has nothing to hear: bytes are a confused peer,
     * EOF or an error a peer that let it go. */
    conn_close(c);
    return;
  }
  if (nread < 0) {
    /* A body that runs to the end of the connection ends here. */
    if (nread == UV_EOF && c->got_bytes) {
      llhttp_finish(&c->parser);
      if (c->complete) {
        deliver(c, 0);
        return;
      }
    }
    conn_fail(c, EPHD_PEER_E_CLOSED);
    return;
  }
  c->got_bytes = 1;
  size_t start = c->in.len;
  c->in.len += (size_t)nread;
  llhttp_errno_t err =
      llhttp_execute(&c->parser, c->in.base + start, (size_t)nread);
  if (err == HPE_OK) {
    /* Everything read is parsed. Once the headers are, only the two we
     * pass back and the body (moved down over its chunk framing) are
     * kept; before, the raw bytes are, separators and all, so they are
     * what the header limit bounds. */
    if (c->headers_done) {
      c->in.len = c->body_started ? c->body_off + c->body_len : c->keep_end;
    } else if (c->in.len > limits.max_header_bytes) {
      conn_fail(c, EPHD_PEER_E_TOO_LARGE);
    }
    return;
  }
  if (err == HPE_PAUSED && c->complete) {
    const char *pos = llhttp_get_error_pos(&c->parser);
    deliver(c, pos == c->in.base + c->in.len);
    return;
  }
  conn_fail(c, c->failure ? c->failure : EPHD_PEER_E_MALFORMED);
}

/* --- parsing ------------------------------------------------------- */

static conn_t *of(llhttp_t *p) { return p->data; }

static int count_header(conn_t *c, size_t len) {
  c->header_bytes += len;
  if (c->header_bytes <= limits.max_header_bytes) return 0;
  c->failure = EPHD_PEER_E_TOO_LARGE;
  return HPE_USER;
}

static void extend(conn_t *c, span_t *s, const char *at, size_t len,
                   int fresh) {
  if (fresh) {
    s->off = (size_t)(at - c->in.base);
    s->len = 0;
  }
  s->len += len;
}

/* Before each message (a 1xx answer is one, then the real one) and each
 * request; the header bytes count over all of a request's messages. */
static void answer_reset(conn_t *c) {
  span_t none = {0, 0};
  for (int i = 0; i < NHDR; i++) c->hdr[i] = none;
  c->field = c->value = none;
  c->hstate = H_NONE;
  c->headers_done = 0;
  c->keep_end = 0;
  c->body_started = 0;
  c->body_off = c->body_len = 0;
  c->complete = 0;
  c->failure = 0;
}

static int on_message_begin(llhttp_t *p) {
  answer_reset(of(p));
  return 0;
}

static int on_status(llhttp_t *p, const char *at, size_t len) {
  (void)at;
  return count_header(of(p), len);
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  conn_t *c = of(p);
  if (c->headers_done) return count_header(c, len);
  extend(c, &c->field, at, len, c->hstate != H_FIELD);
  c->hstate = H_FIELD;
  return count_header(c, len);
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  conn_t *c = of(p);
  if (c->headers_done) return count_header(c, len);
  extend(c, &c->value, at, len, c->hstate != H_VALUE);
  c->hstate = H_VALUE;
  return count_header(c, len);
}

/* The headers the relay passes back; the first of each counts. */
static int on_header_value_complete(llhttp_t *p) {
  conn_t *c = of(p);
  if (c->headers_done) return 0;
  if (c->hstate != H_VALUE) c->value.len = 0;
  c->hstate = H_NONE;
  while (c->value.len && (c->in.base[c->value.off + c->value.len - 1] == ' ' ||
                          c->in.base[c->value.off + c->value.len - 1] == '\t'))
    c->value.len--;
  const char *f = c->in.base + c->field.off;
  int h = -1;
  if (c->field.len == 12 && strncasecmp(f, "content-type", 12) == 0)
    h = HDR_CONTENT_TYPE;
  else if (c->field.len == 11 && strncasecmp(f, "retry-after", 11) == 0)
    h = HDR_RETRY_AFTER;
  else if (c->field.len == 13 && strncasecmp(f, "x-queen-owner", 13) == 0)
    h = HDR_OWNER;
  if (h >= 0 && c->hdr[h].len == 0) c->hdr[h] = c->value;
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  conn_t *c = of(p);
  c->headers_done = 1;
  for (int i = 0; i < NHDR; i++)
    if (c->hdr[i].len && c->hdr[i].off + c->hdr[i].len > c->keep_end)
      c->keep_end = c->hdr[i].off + c->hdr[i].len;
  /* 1xx answers other than 101 carry no body and precede the real one;
   * a 101 would turn the connection into something else. */
  if (p->status_code == 101) {
    c->failure = EPHD_PEER_E_MALFORMED;
    return -1;
  }
  if ((p->flags & F_CONTENT_LENGTH) &&
      p->content_length > limits.max_response_bytes) {
    c->failure = EPHD_PEER_E_TOO_LARGE;
    return -1;
  }
  return c->req->head ? 1 : 0;
}

/* Body bytes always follow their framing, so each piece moves down to
 * the end of the body so far (in place: a chunked body costs no second
 * buffer; a Content-Length body never moves). */
static int on_body(llhttp_t *p, const char *at, size_t len) {
  conn_t *c = of(p);
  if (c->body_len + len > limits.max_response_bytes) {
    c->failure = EPHD_PEER_E_TOO_LARGE;
    return HPE_USER;
  }
  size_t off = (size_t)(at - c->in.base);
  if (!c->body_started) {
    c->body_started = 1;
    c->body_off = off;
  }
  size_t to = c->body_off + c->body_len;
  if (to != off) memmove(c->in.base + to, at, len);
  c->body_len += len;
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  conn_t *c = of(p);
  if (p->status_code < 200) return 0; /* the real answer follows */
  c->complete = 1;
  c->keep_alive = llhttp_should_keep_alive(p);
  return HPE_PAUSED;
}

/* --- addresses ------------------------------------------------------ */

static int parse_port(const char *s, char *out, size_t outlen) {
  size_t n = strlen(s);
  if (n == 0 || n >= outlen || n > 5) return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < 1 || v > 65535) return -1;
  memcpy(out, s, n + 1);
  return (int)v;
}

static int name_usable(const char *h) {
  if (*h == 0 || strlen(h) > 253) return 0;
  for (; *h; h++)
    if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') ||
          (*h >= '0' && *h <= '9') || *h == '-' || *h == '.'))
      return 0;
  return 1;
}

/* "[http://]host:port[/]" into p: an IPv4 literal, an IPv6 literal in
 * brackets, or a name to resolve. */
static int parse_address(ephd_peer_t *p, const char *address) {
  if (strncmp(address, "http://", 7) == 0) address += 7;
  size_t n = strlen(address);
  if (n && address[n - 1] == '/') n--;
  if (n == 0 || n > 300) return -1;
  char a[302];
  memcpy(a, address, n);
  a[n] = 0;
  char *host = a, *colon;
  int bracketed = a[0] == '[';
  if (bracketed) {
    char *close = strchr(a, ']');
    if (close == NULL || close[1] != ':') return -1;
    *close = 0;
    host = a + 1;
    colon = close + 1;
  } else {
    colon = strrchr(a, ':');
    if (colon == NULL) return -1;
    *colon = 0;
    if (strchr(host, ':')) return -1; /* IPv6 needs its brackets */
  }
  int port = parse_port(colon + 1, p->port, sizeof(p->port));
  if (port < 0) return -1;
  p->authority = malloc(n + 1);
  if (p->authority == NULL) return -1;
  memcpy(p->authority, address, n);
  p->authority[n] = 0;
  if (bracketed) {
    return uv_ip6_addr(host, port, (struct sockaddr_in6 *)&p->addrs[0]) == 0
               ? 0
               : -1;
  }
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)&p->addrs[0]) == 0) {
    /* inet_pton is strict: "1.2.3" and "01.2.3.4" are names, refused. */
    return 0;
  }
  if (!name_usable(host)) return -1;
  p->name = strdup(host);
  return p->name ? 0 : -1;
}

/* --- the API ------------------------------------------------------- */

void ephd_peer_init(uv_loop_t *l, const ephd_peer_limits_t *lim) {
  loop = l;
  limits = *lim;
  memset(&stats, 0, sizeof(stats));
  peers = NULL;
  stopping = 0;
  live = 0;
  drain_done = NULL;
  uv_timer_init(loop, &drain_timer);
  llhttp_settings_init(&settings);
  settings.on_message_begin = on_message_begin;
  settings.on_status = on_status;
  settings.on_header_field = on_header_field;
  settings.on_header_value = on_header_value;
  settings.on_header_value_complete = on_header_value_complete;
  settings.on_headers_complete = on_headers_complete;
  settings.on_body = on_body;
  settings.on_message_complete = on_message_complete;
}

ephd_peer_t *ephd_peer(const char *address) {
  if (stopping || address == NULL) return NULL;
  const char *key = strncmp(address, "http://", 7) == 0 ? address + 7 : address;
  size_t n = strlen(key);
  if (n && key[n - 1] == '/') n--;
  for (ephd_peer_t *p = peers; p; p = p->next)
    if (strlen(p->authority) == n && memcmp(p->authority, key, n) == 0)
      return p;
  ephd_peer_t *p = calloc(1, sizeof(*p));
  if (p == NULL) return NULL;
  if (parse_address(p, address) < 0) {
    free(p->authority);
    free(p->name);
    free(p);
    return NULL;
  }
  p->refs = 1;
  uv_timer_init(loop, &p->idle_timer);
  p->idle_timer.data = p;
  p->next = peers;
  peers = p;
  return p;
}

/* A method or a target: visible ASCII and beyond, no space or control. */
static int token_usable(ephd_slice_t s) {
  if (s.len == 0) return 0;
  for (size_t i = 0; i < s.len; i++)
    if ((unsigned char)s.ptr[i] <= ' ' || s.ptr[i] == 127) return 0;
  return 1;
}

/* Whole "Name: value\r\n" lines, no empty one: a stray line break would
 * end the headers early and smuggle the rest to the peer as a request. */
static int headers_usable(ephd_slice_t h) {
  const char *p = h.ptr, *end = h.ptr + h.len;
  if (h.len && memchr(p, 0, h.len)) return 0;
  /* Line by line with memchr, which goes a vector at a time: every relayed
   * request's headers pass here. */
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL || nl - p < 2 || nl[-1] != '\r' ||
        memchr(p, '\r', (size_t)(nl - 1 - p)))
      return 0;
    p = nl + 1;
  }
  return 1;
}

static char *put(char *at, const char *p, size_t n) {
  memcpy(at, p, n);
  return at + n;
}

int ephd_peer_send(ephd_peer_t *p, const ephd_peer_request_t *req,
                   ephd_peer_cb cb, void *data, ephd_peer_call_t **out) {
  if (stopping) {
    stats.failures[-EPHD_PEER_E_STOPPING]++;
    return EPHD_PEER_E_STOPPING;
  }
  if (p == NULL || req == NULL || cb == NULL || req->timeout_ms == 0 ||
      !token_usable(req->method) || !token_usable(req->target) ||
      req->target.ptr[0] != '/' || !headers_usable(req->headers)) {
    stats.failures[-EPHD_PEER_E_INVALID]++;
    return EPHD_PEER_E_INVALID;
  }
  int lane = req->parks ? LANE_PARKS : LANE_SHORT;
  /* Refused when it would wait behind max_queued others: those that the
   * lane's free slots will take at once do not count. */
  uint32_t cap = lane_cap(lane), busy = p->busy[lane];
  uint64_t free_slots = busy < cap ? cap - busy : 0;
  if (p->queue[lane].count >= limits.max_queued + free_slots) {
    stats.failures[-EPHD_PEER_E_QUEUE_FULL]++;
    return EPHD_PEER_E_QUEUE_FULL;
  }
  size_t copied = req->borrows ? 0 : req->body.len;
  char digits[24];
  int nd = 0;
  uint64_t v = req->body.len;
  do {
    digits[sizeof(digits) - 1 - nd++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  static const char version[] = " HTTP/1.1\r\nHost: ",
                    length[] = "\r\nContent-Length: ";
  size_t len = req->method.len + 1 + req->target.len + sizeof(version) - 1 +
               strlen(p->authority) + sizeof(length) - 1 + (size_t)nd + 2 +
               req->headers.len + 2 + copied;
  size_t total = len + req->body.len;
  /* A peer that does not answer holds what was sent it: bounded by its
   * bytes, not only by its queue's count (24 pushes of 12 MiB fit any
   * count). One request is always taken, however large. */
  if (limits.max_peer_bytes && p->bytes &&
      p->bytes + total > limits.max_peer_bytes) {
    stats.failures[-EPHD_PEER_E_PEER_BYTES]++;
    return EPHD_PEER_E_PEER_BYTES;
  }
  ephd_peer_call_t *r = malloc(sizeof(*r) + len);
  if (r == NULL) {
    stats.failures[-EPHD_PEER_E_INVALID]++;
    return EPHD_PEER_E_INVALID;
  }
  memset(r, 0, sizeof(*r));
  char *at = r->bytes;
  at = put(at, req->method.ptr, req->method.len);
  at = put(at, " ", 1);
  at = put(at, req->target.ptr, req->target.len);
  at = put(at, version, sizeof(version) - 1);
  at = put(at, p->authority, strlen(p->authority));
  at = put(at, length, sizeof(length) - 1);
  at = put(at, digits + sizeof(digits) - nd, (size_t)nd);
  at = put(at, "\r\n", 2);
  if (req->headers.len) at = put(at, req->headers.ptr, req->headers.len);
  r->head_end = (size_t)(at - r->bytes);
  at = put(at, "\r\n", 2);
  if (copied) at = put(at, req->body.ptr, copied);
  if (req->borrows && req->body.len) {
    r->body = req->body.ptr;
    r->body_len = req->body.len;
  }
  r->len = len;
  r->total = total;
  r->answer_bytes = req->answer_bytes;
  p->bytes += total;
  stats.bytes += total;
  r->peer = p;
  r->cb = cb;
  r->data = data;
  r->lane = lane;
  r->head = req->method.len == 4 && memcmp(req->method.ptr, "HEAD", 4) == 0;
  r->sent_ns = uv_hrtime();
  r->state = R_QUEUED;
  uv_timer_init(loop, &r->timer);
  r->timer.data = r;
  uv_timer_start(&r->timer, on_request_timer, req->timeout_ms, 0);
  ephd_list_append(&p->queue[lane], &r->link);
  stats.queued++;
  stats.requests++;
  live++;
  *out = r;
  pump(p);
  return 0;
}

void ephd_peer_ignore(void *data, int result, const ephd_peer_response_t *res) {
  (void)data;
  (void)result;
  (void)res;
}

void ephd_peer_cancel(ephd_peer_call_t *r) {
  if (r == NULL || r->state == R_DONE) return;
  ephd_peer_t *p = r->peer;
  detach(r);
  stats.cancelled++;
  pump(p);
}

static ephd_peer_call_t *any_pending(ephd_peer_t *p) {
  if (p->failing.head) return relay_of(p->failing.head);
  if (p->active.head) return relay_of(p->active.head);
  for (int lane = 0; lane < NLANES; lane++)
    if (p->queue[lane].head) return relay_of(p->queue[lane].head);
  return NULL;
}

void ephd_peer_close_all(void) {
  if (stopping) return;
  stopping = 1;
  /* The callbacks may cancel other requests or send (refused now); one
   * at a time from the lists as they stand. No peer is added meanwhile. */
  for (ephd_peer_t *p = peers; p; p = p->next) {
    ephd_peer_call_t *r;
    while ((r = any_pending(p))) complete(r, EPHD_PEER_E_STOPPING, NULL);
    while (p->idle.head) conn_close(conn_of(p->idle.head));
  }
  drain_done = NULL;
  uv_close((uv_handle_t *)&drain_timer, NULL);
  ephd_peer_t *p = peers;
  peers = NULL;
  while (p) {
    ephd_peer_t *next = p->next;
    if (p->resolving) uv_cancel((uv_req_t *)&p->gai);
    uv_close((uv_handle_t *)&p->idle_timer, on_peer_timer_closed);
    p = next;
  }
}

const ephd_peer_stats_t *ephd_peer_stats(void) { return &stats; }

/* By -kind, as the metrics will label them. */
static const char *const kind_names[EPHD_PEER_NKINDS] = {
    [EPHD_PEER_OK] = "ok",
    [-EPHD_PEER_E_CONNECT] = "connect",
    [-EPHD_PEER_E_RESOLVE] = "resolve",
    [-EPHD_PEER_E_QUEUE_TIMEOUT] = "queue_timeout",
    [-EPHD_PEER_E_CONNECT_TIMEOUT] = "connect_timeout",
    [-EPHD_PEER_E_ANSWER_TIMEOUT] = "answer_timeout",
    [-EPHD_PEER_E_CLOSED] = "closed",
    [-EPHD_PEER_E_MALFORMED] = "malformed",
    [-EPHD_PEER_E_TOO_LARGE] = "too_large",
    [-EPHD_PEER_E_QUEUE_FULL] = "queue_full",
    [-EPHD_PEER_E_STOPPING] = "stopping",
    [-EPHD_PEER_E_INVALID] = "invalid",
    [-EPHD_PEER_E_PEER_BYTES] = "peer_bytes",
};

const char *ephd_peer_kind_name(int kind) {
  return kind <= 0 && kind > -EPHD_PEER_NKINDS ? kind_names[-kind] : "unknown";
}
