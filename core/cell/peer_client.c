#include "peer_client.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "buf.h"
#include "list.h"
#include "llhttp.h"
#include "map.h"
#include "peer_answer.h"

/* What an idle connection keeps of its read buffer for the next answer:
 * a relayed push's answer is a few hundred bytes, a pop's may be
 * megabytes, and those are given back once delivered. */
#define IDLE_KEEP_BYTES 16384
/* The addresses of a resolved name tried in turn (localhost may be ::1
 * and 127.0.0.1; the broker may listen on only one). */
#define MAX_ADDRS 4
#define MAX_PIPES 16
/* A pipe's connection writes at most this many requests at once (each is
 * up to four buffers: its head around the session line, and a borrowed
 * body); the rest go in the next write, once this one is taken. */
#define WRITE_MAX 64

/* The lanes with slots and FIFOs; a request with a key is on a pipe. */
enum { LANE_SHORT, LANE_PARKS, NLANES, LANE_PIPE = NLANES };

/* A request of a lane is queued (waiting for a slot), active (holding a
 * slot, and a connection unless between two of them), failing (its
 * failure found inside an API call, told from a timer on the next loop
 * turn so a callback never runs inside send or cancel), or done. One on a
 * pipe is piped (waiting for its pipe's next write), written (its answer
 * due in its turn), orphaned (written, then cancelled: its answer is read
 * and dropped), answered, failing (told from its peer's timer), or done. */
enum {
  R_QUEUED,
  R_ACTIVE,
  R_FAILING,
  R_DONE,
  R_PIPED,
  R_WRITTEN,
  R_ORPHAN,
  R_ANSWERED
};
enum { C_CONNECTING, C_BUSY, C_IDLE, C_CLOSED };
enum { H_NONE, H_FIELD, H_VALUE };
enum { HDR_CONTENT_TYPE, HDR_RETRY_AFTER, HDR_OWNER, NHDR };

typedef ephd_head_span_t span_t;

/* A share's parking requests to one peer (its in-flight and waiting ones),
 * while it has any. */
typedef struct {
  uint64_t tag;
  uint32_t count;
} share_t;

typedef struct conn conn_t;

/* A line of pipelined requests to a peer, on one connection at a time. */
typedef struct {
  ephd_peer_t *peer;
  conn_t *conn;           /* connecting or open; NULL: none */
  ephd_list_t unwritten;  /* in order, for its connection's next write */
  ephd_node_t flush_link; /* in flushes, until the loop turn's end */
  int addrs_tried;        /* by its connection being opened */
  /* A kind its unwritten requests fail with from the peer's timer: their
   * connection could not even be started (inside send or cancel). */
  int failure;
} pipe_t;

struct ephd_peer_call {
  /* A lane's: the deadline; at 0 for a failure told later. A pipe's
   * requests have none: their peer's one timer watches their deadlines. */
  uv_timer_t timer;
  ephd_peer_t *peer;
  conn_t *conn;
  pipe_t *pipe;
  share_t *share;    /* a parking request's, or NULL */
  uint64_t deadline; /* a pipe's: in loop milliseconds */
  ephd_node_t link;  /* in one list of its peer's, by state */
  ephd_peer_cb cb;
  void *data;
  uint64_t sent_ns;
  int lane;
  int state;
  int failure; /* R_FAILING: the kind its timer reports */
  int head;    /* a HEAD request: its answer has no body */
  int retried;
  int addrs_tried;
  uint32_t write_no; /* a pipe's: which write of its connection carried it */
  void (*answer_bytes)(void *data, size_t bytes);
  size_t head_end;   /* in bytes: where the head's blank line begins */
  size_t answer_cap; /* what answer_bytes was last told */
  size_t total;      /* len and the body's: what the peer's bytes count */
  const char *body;  /* a borrowed body, written after bytes; or NULL */
  size_t body_len;
  /* A cancelled request whose borrowed body its connection's write still
   * holds is lent (in the connection's lent list) until that write ends,
   * then release(lender) gives the body back; one freed meanwhile (its
   * answer read, its line dropped) is R_DONE, and freed then. */
  void (*release)(void *lender);
  void *lender;
  ephd_node_t lent_link;
  int lent;
  size_t len;
  char bytes[]; /* the request as written (its body unless borrowed) */
};

struct conn {
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_write_t write;
  llhttp_t parser;
  ephd_peer_t *peer;
  /* Whose answer is read next: the one request it is connecting or busy
   * for, or its pipe's oldest written. */
  ephd_peer_call_t *req;
  pipe_t *pipe;          /* the pipe it carries; NULL: one request at a time */
  ephd_list_t written;   /* a pipe's: written, answered in this order */
  ephd_list_t lent;      /* cancelled, their bodies in the write: on_write */
  ephd_node_t idle_link; /* in the peer's idle list, newest first */
  /* What was read: whole answers first (taken), then the one in progress;
   * llhttp's, headers as read and the body compacted. */
  ephd_buf_t in;
  size_t taken;  /* bytes of in read as whole answers */
  size_t parsed; /* bytes of in given to llhttp */
  int llhttp_on; /* the answer in progress is llhttp's: not plain */
  /* A pipe's: it was idle (every answer read) and no byte came since, so
   * a close now is the peer's idle close and it read nothing written. */
  int quiet;
  uint64_t idle_since;
  int state;
  int addr;      /* which of the peer's addresses */
  uint32_t uses; /* answers it carried */
  int writing;
  uint32_t writes; /* a pipe's: the writes made on it */
  int sessioned;   /* its first request carried the session line */
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
  pipe_t pipes[MAX_PIPES];
  uint32_t piped;           /* requests on its pipes, not done */
  ephd_map_t shares;        /* of its parking lane, by tag */
  ephd_list_t pipe_failing; /* a pipe's requests whose failure is told late */
  /* Its one timer: idle connections' ages, and its pipes' deadlines and
   * late failures, armed for the earliest (a pipe's later requests do not
   * move it). */
  uv_timer_t timer;
  uint64_t timer_due;
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
/* The pipes with requests to write, written once the loop has read what
 * was ready: every request relayed meanwhile goes in one write per pipe
 * (NATS flushes a route once per read loop pass for the same reason: a
 * loopback write costs microseconds of kernel, and each one that finds its
 * owner asleep wakes it). A turn that relayed a request holds the writes
 * to the next turn, whose poll does not block (the idle handle): if it
 * reads more requests, they join the same writes. So the writes wait for a
 * turn that relays nothing, at most FLUSH_HOLD_TURNS turns, and a pipe
 * holding a whole write's worth is written at once. Held, a request waits
 * for reads that were ready anyway; an owner that is sent fewer, larger
 * writes wakes less, and under load that halves the relay's kernel time. */
#define FLUSH_HOLD_TURNS 8
static ephd_list_t flushes;
static uv_check_t flush_check;
static uv_idle_t flush_idle;
static int relayed_this_turn;
static unsigned flush_held;
/* The clock read once for every answer a read brings, and once for every
 * request a pipe's write carries, for the latency histogram: a batch of
 * sixty-four costs two reads of it, not a hundred and twenty-eight. 0
 * while no read is being handled. */
static uint64_t read_ns;

static void pump(ephd_peer_t *p);
static void conn_open(ephd_peer_t *p, ephd_peer_call_t *r);
static void on_request_timer(uv_timer_t *t);
static void on_peer_timer(uv_timer_t *t);
static void pipe_connect(pipe_t *pp);
static void pipe_write(pipe_t *pp);
static void pipe_drop(conn_t *c, int kind, int late);
static int addresses_ready(ephd_peer_t *p);
static void resolve(ephd_peer_t *p);

static uint32_t lane_cap(int lane) {
  return lane == LANE_SHORT ? limits.max_conns : limits.max_parked;
}

static uint32_t npipes(void) {
  return limits.pipes < 1           ? 1
         : limits.pipes > MAX_PIPES ? MAX_PIPES
                                    : limits.pipes;
}

/* Arms the peer's timer for due unless it will fire by then anyway: a
 * pipe's requests are written in order with the same deadline, so most
 * arm nothing. */
static void peer_timer_at(ephd_peer_t *p, uint64_t due) {
  if (stopping ||
      (uv_is_active((uv_handle_t *)&p->timer) && p->timer_due <= due))
    return;
  uint64_t now = uv_now(loop);
  p->timer_due = due;
  uv_timer_start(&p->timer, on_peer_timer, due > now ? due - now : 0, 0);
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
 * (the caller decides its fate; a pipe's written requests are moved off
 * it first). The write and connect requests libuv still holds come back
 * cancelled before the handle's close callback. */
static int conn_end(conn_t *c) {
  if (c->state == C_CLOSED) return 0;
  if (c->state == C_IDLE) ephd_list_remove(&c->peer->idle, &c->idle_link);
  if (c->pipe && c->pipe->conn == c) c->pipe->conn = NULL;
  if (c->req && c->pipe == NULL) c->req->conn = NULL;
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
  peer_timer_at(p, c->idle_since + limits.idle_timeout_ms);
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

static void gone(ephd_peer_call_t *r) {
  r->peer->bytes -= r->total;
  stats.bytes -= r->total;
}

/* One nobody waits for any more: it was counted live until cancelled. */
static void not_live(void) {
  /* On a later turn: a callback has yet to run, and may send again. */
  if (--live == 0 && drain_done) uv_timer_start(&drain_timer, on_drained, 0, 0);
}

/* A cancelled request's answer was read (or its connection is gone); one
 * lent is freed once its body is given back (on_write). */
static void orphan_free(ephd_peer_call_t *r) {
  r->peer->piped--;
  stats.in_flight--;
  gone(r);
  if (r->lent)
    r->state = R_DONE;
  else
    free(r);
}

/* Takes r out of every list and slot it holds and closes a connection of
 * its own (an answer half read is of no use to anyone); a pipe's stays
 * for the others' answers. A lane's request is freed once its timer has
 * closed, a pipe's by the caller. */
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
      ephd_list_remove(r->lane == LANE_PIPE ? &p->pipe_failing : &p->failing,
                       &r->link);
      break;
    case R_PIPED:
      ephd_list_remove(&r->pipe->unwritten, &r->link);
      break;
    case R_WRITTEN:
      ephd_list_remove(&r->conn->written, &r->link);
      break;
  }
  gone(r);
  if (r->share && --r->share->count == 0) {
    ephd_map_del(&p->shares, (const char *)&r->share->tag, sizeof(uint64_t));
    free(r->share);
  }
  if (r->lane == LANE_PIPE) {
    p->piped--;
    stats.in_flight--;
  } else {
    if (r->conn) conn_abort(r->conn);
    uv_close((uv_handle_t *)&r->timer, on_request_closed);
  }
  r->state = R_DONE;
  not_live();
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
    uint64_t ns = (read_ns ? read_ns : uv_hrtime()) - r->sent_ns;
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
  if (r->lane == LANE_PIPE) free(r);
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

/* --- pipes ---------------------------------------------------------- */

/* Every pipe with requests to write: one write each, once a turn relayed
 * nothing (or after FLUSH_HOLD_TURNS); a full write's worth at once. */
static void on_flush_check(uv_check_t *h) {
  (void)h;
  if (!flushes.head) {
    relayed_this_turn = 0;
    flush_held = 0;
    return;
  }
  int hold = relayed_this_turn && flush_held < FLUSH_HOLD_TURNS && !stopping;
  relayed_this_turn = 0;
  flush_held = hold ? flush_held + 1 : 0;
  ephd_node_t *n = flushes.head;
  while (n) {
    pipe_t *pp = EPHD_ENTRY(n, pipe_t, flush_link);
    n = n->next;
    if (hold && pp->unwritten.count < WRITE_MAX) continue;
    ephd_list_remove(&flushes, &pp->flush_link);
    pipe_write(pp);
  }
  if (!flushes.head) uv_idle_stop(&flush_idle);
}

static void on_flush_idle(uv_idle_t *h) { (void)h; }

static void flush_later(pipe_t *pp) {
  if (ephd_list_has(&flushes, &pp->flush_link)) return;
  ephd_list_append(&flushes, &pp->flush_link);
  if (!uv_is_active((uv_handle_t *)&flush_idle))
    uv_idle_start(&flush_idle, on_flush_idle);
}

/* The request's buffers into b: its head (around the session line, on a
 * connection's first request) and a borrowed body. At most four. */
static unsigned request_bufs(conn_t *c, ephd_peer_call_t *r, uv_buf_t *b) {
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
  return nb;
}

static void on_write(uv_write_t *w, int status);

/* r, taken off its connection's written list, goes first among the pipe's
 * unwritten for a fresh connection: once (retried), as no peer read it. */
static void write_again(pipe_t *pp, ephd_peer_call_t *r) {
  r->retried = 1;
  stats.retries++;
  r->state = R_PIPED;
  r->conn = NULL;
  ephd_list_prepend(&pp->unwritten, &r->link);
}

/* What the pipe holds unwritten goes in writes of at most WRITE_MAX
 * requests, behind what its connection has written already. Each is tried
 * at once (uv_try_write): the kernel nearly always takes it whole, and then
 * libuv's write request, whose completion costs an epoll_ctl, is never
 * made. What the kernel leaves goes in one uv_write, and the next write
 * waits for it (on_write). */
static void pipe_write(pipe_t *pp) {
  conn_t *c = pp->conn;
  while (c && c->state == C_BUSY && !c->writing && pp->unwritten.head) {
    uv_buf_t b[4 * WRITE_MAX];
    unsigned nb = 0, n = 0;
    size_t bytes = 0;
    uint64_t now_ns = uv_hrtime();
    ephd_node_t *before = c->written.tail;
    c->writes++;
    ephd_peer_call_t *r;
    while (n++ < WRITE_MAX && (r = relay_of(pp->unwritten.head))) {
      ephd_list_remove(&pp->unwritten, &r->link);
      ephd_list_append(&c->written, &r->link);
      r->state = R_WRITTEN;
      r->conn = c;
      r->write_no = c->writes;
      r->sent_ns = now_ns;
      unsigned from = nb;
      nb += request_bufs(c, r, b + nb);
      for (; from < nb; from++) bytes += b[from].len;
    }
    if (c->req == NULL) c->req = relay_of(c->written.head);
    stats.pipe_writes++;
    int took = uv_try_write((uv_stream_t *)&c->tcp, b, nb);
    if (took == UV_EAGAIN) took = 0;
    if (took < 0) {
      /* The kernel took none of it (the peer reset the line after this
       * turn's poll): its requests were never written, and go on a fresh
       * connection ahead of the rest. Once: a peer that resets every line
       * before our write does not keep them connecting to it. */
      ephd_node_t *at = c->written.tail;
      while (at != before) {
        r = relay_of(at);
        at = at->prev;
        if (r->retried) continue; /* fails with the line */
        ephd_list_remove(&c->written, &r->link);
        write_again(pp, r);
      }
      pipe_drop(c, EPHD_PEER_E_CLOSED, 0);
      return;
    }
    if ((size_t)took == bytes) continue;
    unsigned first = 0;
    size_t left = (size_t)took;
    for (; left >= b[first].len; first++) left -= b[first].len;
    b[first].base += left;
    b[first].len -= (unsigned)left;
    c->write.data = c;
    if (uv_write(&c->write, (uv_stream_t *)&c->tcp, b + first, nb - first,
                 on_write) < 0) {
      pipe_drop(c, EPHD_PEER_E_CLOSED, 0);
      return;
    }
    c->writing = 1;
  }
}

static conn_t *conn_new(ephd_peer_t *p, int addr);
static int conn_connect(conn_t *c);

/* A connection for the pipe's requests. Inside send and cancel: a failure
 * libuv reports at once is told from the peer's timer. */
static void pipe_connect(pipe_t *pp) {
  ephd_peer_t *p = pp->peer;
  if (stopping || pp->conn || pp->failure || !pp->unwritten.head) return;
  if (!addresses_ready(p)) {
    resolve(p);
    return;
  }
  int naddrs = p->name ? p->naddrs : 1;
  conn_t *c = conn_new(p, (p->preferred + pp->addrs_tried) % naddrs);
  if (c == NULL) {
    pp->failure = EPHD_PEER_E_CONNECT;
    peer_timer_at(p, uv_now(loop));
    return;
  }
  c->pipe = pp;
  pp->conn = c;
  if (conn_connect(c) < 0) {
    conn_close(c);
    pp->failure = EPHD_PEER_E_CONNECT;
    peer_timer_at(p, uv_now(loop));
  }
}

/* Every request still on the pipe's way, in order: told now (from a libuv
 * callback), or from the peer's timer (late: inside send or cancel). */
static void tell_failures(ephd_peer_t *p, int late) {
  if (late) {
    peer_timer_at(p, uv_now(loop));
    return;
  }
  /* Those a callback adds meanwhile wait for the timer. */
  size_t n = p->pipe_failing.count;
  ephd_peer_call_t *r;
  while (n-- && (r = relay_of(p->pipe_failing.head)))
    complete(r, r->failure, NULL);
}

static void fail_later(ephd_peer_call_t *r, int kind) {
  r->state = R_FAILING;
  r->failure = kind;
  r->conn = NULL;
  ephd_list_append(&r->peer->pipe_failing, &r->link);
}

/* Every request the pipe has not written fails with kind, now: those a
 * callback sends meanwhile are the next connection's, not this failure's
 * (an asker that sent again at each failure held the loop for ever). */
static void fail_unwritten(pipe_t *pp, int kind) {
  ephd_peer_call_t *r;
  while ((r = relay_of(pp->unwritten.head))) {
    ephd_list_remove(&pp->unwritten, &r->link);
    fail_later(r, kind);
  }
  tell_failures(pp->peer, 0);
}

/* The pipe's connection is gone (the peer closed or reset it, a write
 * failed, the oldest answer's deadline passed, bytes nobody asked for, a
 * cancel while its bytes were still being written). Its written requests
 * fail (the peer may have read and applied them: a push must never be
 * applied twice), except when it was quiet: the peer had answered all it
 * was sent, said nothing since, and closed it (ephd's server closes a
 * connection only while it holds no request of it, so this is its idle
 * close racing our write: it read none of them). Those are written once
 * more, first, on a fresh connection, with those never written. */
static void pipe_drop(conn_t *c, int kind, int late) {
  pipe_t *pp = c->pipe;
  ephd_peer_t *p = pp->peer;
  int resend = kind == EPHD_PEER_E_CLOSED && c->quiet;
  ephd_list_t failed = {0};
  ephd_peer_call_t *r;
  while ((r = relay_of(c->written.tail))) {
    ephd_list_remove(&c->written, &r->link);
    if (r->state == R_ORPHAN) {
      orphan_free(r);
    } else if (resend && !r->retried) {
      write_again(pp, r);
    } else {
      ephd_list_prepend(&failed, &r->link);
    }
  }
  while ((r = relay_of(failed.head))) {
    ephd_list_remove(&failed, &r->link);
    fail_later(r, kind);
  }
  conn_abort(c);
  pipe_connect(pp);
  tell_failures(p, late);
}

/* A pipe's connection is open, or could not be. */
static void pipe_connected(conn_t *c, int status) {
  pipe_t *pp = c->pipe;
  ephd_peer_t *p = pp->peer;
  if (status < 0) {
    conn_close(c);
    int naddrs = p->name ? p->naddrs : 1;
    /* Another address of the name may be the one the peer listens on. */
    if (++pp->addrs_tried < naddrs) {
      pipe_connect(pp);
      return;
    }
    pp->addrs_tried = 0;
    fail_unwritten(pp, EPHD_PEER_E_CONNECT);
    return;
  }
  pp->addrs_tried = 0;
  p->preferred = c->addr;
  c->state = C_BUSY;
  c->idle_since = uv_now(loop);
  /* Its requests may all have gone while it connected: it ages then. */
  peer_timer_at(p, c->idle_since + limits.idle_timeout_ms);
  pipe_write(pp);
}

/* What is due on the pipe, from the peer's timer: late failures, the
 * oldest answer's deadline (its connection is dropped), requests never
 * written past theirs, and a connection idle for idle_timeout_ms. Returns
 * when the pipe next needs the timer, or UINT64_MAX. */
static uint64_t pipe_tend(pipe_t *pp, uint64_t now) {
  if (pp->failure && pp->conn == NULL) {
    int kind = pp->failure;
    pp->failure = 0;
    fail_unwritten(pp, kind);
  }
  conn_t *c = pp->conn;
  ephd_peer_call_t *w = c ? relay_of(c->written.head) : NULL;
  if (w && w->deadline <= now) pipe_drop(c, EPHD_PEER_E_ANSWER_TIMEOUT, 0);
  ephd_peer_call_t *u = relay_of(pp->unwritten.head);
  if (u && u->deadline <= now) {
    int kind = EPHD_PEER_E_QUEUE_TIMEOUT;
    if (pp->conn && pp->conn->state == C_CONNECTING) {
      /* Given up with them: the kernel may go on retrying that attempt
       * for minutes after the peer is reachable again, and the next
       * request would wait on it. It tries a fresh one. */
      kind = EPHD_PEER_E_CONNECT_TIMEOUT;
      conn_abort(pp->conn);
    }
    while ((u = relay_of(pp->unwritten.head)) && u->deadline <= now)
      complete(u, kind, NULL);
    pipe_connect(pp);
  }
  c = pp->conn;
  if (c && (w = relay_of(c->written.head))) return w->deadline;
  if (u) return u->deadline;
  if (c == NULL || c->state != C_BUSY) return UINT64_MAX;
  uint64_t idle_end = c->idle_since + limits.idle_timeout_ms;
  if (idle_end > now) return idle_end;
  conn_close(c);
  return UINT64_MAX;
}

static void on_peer_timer(uv_timer_t *t) {
  ephd_peer_t *p = t->data;
  uint64_t now = uv_now(loop);
  conn_t *oldest;
  while ((oldest = conn_of(p->idle.tail)) &&
         oldest->idle_since + limits.idle_timeout_ms <= now)
    conn_close(oldest);
  tell_failures(p, 0);
  uint64_t due = UINT64_MAX;
  for (uint32_t i = 0; i < npipes(); i++) {
    uint64_t d = pipe_tend(&p->pipes[i], now);
    if (d < due) due = d;
  }
  if ((oldest = conn_of(p->idle.tail)) &&
      oldest->idle_since + limits.idle_timeout_ms < due)
    due = oldest->idle_since + limits.idle_timeout_ms;
  if (p->pipe_failing.head) due = now;
  /* A callback above may have sent, arming the timer for a pipe already
   * looked at: the sooner due stands. */
  if (uv_is_active((uv_handle_t *)t) && p->timer_due < due) due = p->timer_due;
  if (due != UINT64_MAX && !stopping) {
    p->timer_due = due;
    uv_timer_start(t, on_peer_timer, due > now ? due - now : 0, 0);
  }
}

/* Whether the write that carried r still holds bytes of it (its head, or
 * its body, borrowed or not); next is the request written after it, if
 * any. Only the connection's last write can, one write being made at a
 * time, and its bytes go out in order: r's are all out once what libuv
 * has left of it is no more than the requests after r in it. (A small
 * push answered while a large one behind it is still going out is no
 * early answer.) */
static int still_writing(conn_t *c, const ephd_peer_call_t *r,
                         ephd_node_t *next) {
  if (!c->writing || r->write_no != c->writes) return 0;
  size_t left = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
  size_t after = 0;
  for (; next && after < left; next = next->next) {
    const ephd_peer_call_t *w = relay_of(next);
    after += w->len + w->body_len;
  }
  return left > after;
}

/* A written request is cancelled. Its answer will come in its turn, and
 * the answers behind it are wanted: it stays on its connection, to be
 * read and dropped. Its own bytes stay with it; a borrowed body the write
 * still holds is lent until the write ends (1), when its asker can wait
 * for it (release), and otherwise goes away with its asker: then the
 * connection goes, as any lost one, its failures told from the timer. */
static int pipe_orphan(ephd_peer_call_t *r) {
  conn_t *c = r->conn;
  r->cb = NULL;
  r->data = NULL;
  r->answer_bytes = NULL;
  r->state = R_ORPHAN;
  not_live();
  if (r->body == NULL || !still_writing(c, r, r->link.next)) return 0;
  if (r->release) {
    r->lent = 1;
    ephd_list_append(&c->lent, &r->lent_link);
    return 1;
  }
  /* We drop it, the peer did not close it: quiet or not, the peer may
   * have read every request written before the bytes still held (a push
   * it holds, or is applying), and none may be written again. */
  c->quiet = 0;
  pipe_drop(c, EPHD_PEER_E_CLOSED, 1);
  return 0;
}

/* close_all: every pipe's requests hear that this broker stops. */
static void pipes_stop(ephd_peer_t *p) {
  for (uint32_t i = 0; i < npipes(); i++) {
    pipe_t *pp = &p->pipes[i];
    ephd_peer_call_t *r;
    if (pp->conn) {
      conn_t *c = pp->conn;
      while ((r = relay_of(c->written.head))) {
        ephd_list_remove(&c->written, &r->link);
        if (r->state == R_ORPHAN)
          orphan_free(r);
        else
          fail_later(r, EPHD_PEER_E_STOPPING);
      }
      conn_abort(c);
    }
    while ((r = relay_of(pp->unwritten.head))) {
      ephd_list_remove(&pp->unwritten, &r->link);
      fail_later(r, EPHD_PEER_E_STOPPING);
    }
  }
  ephd_peer_call_t *r;
  while ((r = relay_of(p->pipe_failing.head)))
    complete(r, EPHD_PEER_E_STOPPING, NULL);
}

/* --- resolving ------------------------------------------------------ */

static void peer_release(ephd_peer_t *p) {
  if (--p->refs) return;
  ephd_map_free(&p->shares); /* empty: every request ended */
  free(p->authority);
  free(p->name);
  free(p);
}

static void on_peer_timer_closed(uv_handle_t *h) { peer_release(h->data); }

static void fail_queued(ephd_peer_t *p, int kind) {
  for (int lane = 0; lane < NLANES; lane++)
    while (p->queue[lane].head) fail_soon(relay_of(p->queue[lane].head), kind);
  for (uint32_t i = 0; i < npipes(); i++) {
    pipe_t *pp = &p->pipes[i];
    if (pp->conn == NULL && pp->unwritten.head) {
      pp->failure = kind;
      peer_timer_at(p, uv_now(loop));
    }
  }
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
  /* Done, failed or cancelled by the close: libuv reads none of it now. */
  ephd_node_t *n;
  while ((n = c->lent.head)) {
    ephd_peer_call_t *r = EPHD_ENTRY(n, ephd_peer_call_t, lent_link);
    ephd_list_remove(&c->lent, n);
    r->lent = 0;
    r->release(r->lender);
    if (r->state == R_DONE) free(r);
  }
  if (c->state == C_CLOSED) return;
  if (status < 0)
    conn_fail(c, EPHD_PEER_E_CLOSED);
  else if (c->pipe && c->pipe->unwritten.head)
    flush_later(c->pipe);
}

static void conn_send(conn_t *c, ephd_peer_call_t *r) {
  c->req = r;
  r->conn = c;
  c->state = C_BUSY;
  c->header_bytes = 0;
  c->got_bytes = 0;
  c->llhttp_on = 0;
  c->in.len = c->taken = 0;
  uv_buf_t b[4];
  unsigned nb = request_bufs(c, r, b);
  c->write.data = c;
  if (uv_write(&c->write, (uv_stream_t *)&c->tcp, b, nb, on_write) == 0)
    c->writing = 1;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn_t *c = h->data;
  (void)suggested;
  ephd_peer_call_t *r = c->req;
  if (r == NULL) {
    *buf = uv_buf_init(idle_scratch, sizeof(idle_scratch));
    return;
  }
  char *at = ephd_buf_reserve(&c->in, 16384);
  *buf = uv_buf_init(at, (unsigned)(c->in.cap - c->in.len));
  if (r->answer_bytes && r->answer_cap != c->in.cap) {
    r->answer_cap = c->in.cap;
    r->answer_bytes(r->data, c->in.cap);
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_connect(uv_connect_t *req, int status) {
  conn_t *c = req->data;
  if (c->state == C_CLOSED) return;
  if (status == 0) {
    uv_tcp_nodelay(&c->tcp, 1);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
      status = UV_EIO;
  }
  if (c->pipe) {
    pipe_connected(c, status);
    return;
  }
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
  conn_send(c, r);
  if (!c->writing) {
    conn_close(c);
    complete(r, EPHD_PEER_E_CLOSED, NULL);
  }
}

static conn_t *conn_new(ephd_peer_t *p, int addr) {
  conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  uv_tcp_init(loop, &c->tcp);
  c->tcp.data = c;
  c->peer = p;
  c->state = C_CONNECTING;
  llhttp_init(&c->parser, HTTP_RESPONSE, &settings);
  c->parser.data = c;
  c->addr = addr;
  stats.connections_opened++;
  stats.connections_open++;
  return c;
}

static int conn_connect(conn_t *c) {
  c->connect.data = c;
  return uv_tcp_connect(&c->connect, &c->tcp,
                        (const struct sockaddr *)&c->peer->addrs[c->addr],
                        on_connect);
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
  conn_t *c = conn_new(p, (p->preferred + r->addrs_tried) % naddrs);
  if (c == NULL) {
    fail_soon(r, EPHD_PEER_E_CONNECT);
    return;
  }
  c->req = r;
  r->conn = c;
  if (conn_connect(c) < 0) fail_soon(r, EPHD_PEER_E_CONNECT);
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
 * slot of the parking lane only, so pushes never wait behind it. A pipe
 * with requests and no connection (its last one lost, a resolution just
 * in) opens one. */
static void pump(ephd_peer_t *p) {
  if (stopping) return;
  if (p->piped)
    for (uint32_t i = 0; i < npipes(); i++) pipe_connect(&p->pipes[i]);
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
      conn_send(c, r);
      if (!c->writing) {
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
 * answer has begun: the request was read and may have been applied. A
 * pipe's connection: pipe_drop. */
static void conn_fail(conn_t *c, int kind) {
  if (c->pipe) {
    pipe_drop(c, kind, 0);
    return;
  }
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

static ephd_peer_response_t response_of(const ephd_buf_t *in,
                                        const ephd_answer_t *a) {
  ephd_peer_response_t res;
  res.status = a->status;
  res.content_type = slice_of(in, a->content_type);
  res.retry_after = slice_of(in, a->retry_after);
  res.owner = slice_of(in, a->owner);
  res.body = slice_of(in, a->body);
  return res;
}

/* The one request of a connection is answered: the connection goes back
 * to the pool (or closes) before the callback, so a request sent from it
 * can use it at once; the bytes the callback sees move out of the
 * connection for the call. */
static void deliver(conn_t *c, const ephd_answer_t *a) {
  ephd_peer_call_t *r = c->req;
  ephd_buf_t kept = c->in;
  ephd_peer_response_t res = response_of(&kept, a);
  /* An answer that came while the request was still being written, or
   * bytes after it, leave the connection in a state we cannot trust. */
  int reusable = c->taken == c->in.len && a->keep_alive && !c->writing;
  ephd_buf_init(&c->in);
  c->taken = 0;
  c->req = NULL;
  r->conn = NULL;
  c->uses++;
  if (reusable && !stopping)
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

/* The oldest written request of a pipe is answered; the next one's answer
 * may follow in the same bytes. Returns whether the connection reads on. */
static int pipe_deliver(conn_t *c, const ephd_answer_t *a) {
  ephd_peer_call_t *r = c->req;
  ephd_peer_response_t res = response_of(&c->in, a);
  ephd_node_t *next = r->link.next;
  ephd_list_remove(&c->written, &r->link);
  c->req = relay_of(c->written.head);
  c->uses++;
  /* The peer answered before it read all of r: the write goes on from
   * bytes the asker frees once it hears (a borrowed body, r itself). The
   * line ends first, as one we drop (the rest told later, after this). */
  if (still_writing(c, r, next)) {
    c->quiet = 0;
    pipe_drop(c, EPHD_PEER_E_CLOSED, 1);
  }
  if (c->req == NULL && c->taken == c->in.len) {
    c->quiet = 1;
    c->idle_since = uv_now(loop);
  }
  /* The bytes stay where they are through the callback: nothing moves the
   * buffer before this connection reads again. */
  if (r->state == R_ORPHAN) {
    orphan_free(r);
  } else {
    r->state = R_ANSWERED;
    complete(r, EPHD_PEER_OK, &res);
  }
  if (c->state == C_CLOSED) return 0;
  if (!a->keep_alive || stopping) {
    pipe_drop(c, EPHD_PEER_E_CLOSED, 0);
    return 0;
  }
  return 1;
}

/* The bytes of answers read whole go; what follows moves to the front. */
static void compact(conn_t *c) {
  if (c->taken == 0) return;
  size_t rest = c->in.len - c->taken;
  if (rest) memmove(c->in.base, c->in.base + c->taken, rest);
  c->in.len = rest;
  c->taken = 0;
  if (rest == 0) ephd_buf_shrink(&c->in, IDLE_KEEP_BYTES);
}

static void answer_reset(conn_t *c);

/* llhttp's answer is whole, ending at end. */
static int took_llhttp(conn_t *c, size_t end) {
  ephd_answer_t a = {
      .status = c->parser.status_code,
      .content_type = c->hdr[HDR_CONTENT_TYPE],
      .retry_after = c->hdr[HDR_RETRY_AFTER],
      .owner = c->hdr[HDR_OWNER],
      .body = {c->body_off, c->body_started ? c->body_len : 0},
      .keep_alive = c->keep_alive,
  };
  c->llhttp_on = 0;
  c->taken = end;
  if (c->pipe) return pipe_deliver(c, &a);
  deliver(c, &a);
  return 0;
}

/* Reads every whole answer in c->in, in order, for the requests written:
 * plain ones at once (peer_answer.h), anything else by llhttp from its
 * first byte, as it arrives. */
static void read_answers(conn_t *c) {
  while (c->req) {
    if (!c->llhttp_on) {
      size_t avail = c->in.len - c->taken;
      if (avail == 0) break;
      ephd_answer_t a;
      size_t n = c->req->head
                     ? 0
                     : ephd_answer_read_plain(c->in.base + c->taken, avail,
                                              limits.max_header_bytes,
                                              limits.max_response_bytes, &a);
      if (n) {
        a.content_type.off += c->taken;
        a.retry_after.off += c->taken;
        a.owner.off += c->taken;
        a.body.off += c->taken;
        c->taken += n;
        if (c->pipe == NULL) {
          deliver(c, &a);
          return;
        }
        if (!pipe_deliver(c, &a)) return;
        continue;
      }
      /* Not plain, or not whole yet: llhttp reads it from its first byte,
       * at the front of the buffer, as it arrives. */
      compact(c);
      llhttp_reset(&c->parser);
      answer_reset(c);
      c->header_bytes = 0;
      c->parsed = 0;
      c->llhttp_on = 1;
    }
    llhttp_errno_t err = llhttp_execute(&c->parser, c->in.base + c->parsed,
                                        c->in.len - c->parsed);
    if (err == HPE_OK) {
      /* Everything read is parsed. Once the headers are, only the three
       * we pass back and the body (moved down over its chunk framing) are
       * kept; before, the raw bytes are, separators and all, so they are
       * what the header limit bounds. */
      if (c->headers_done) {
        c->in.len = c->body_started ? c->body_off + c->body_len : c->keep_end;
      } else if (c->in.len > limits.max_header_bytes) {
        conn_fail(c, EPHD_PEER_E_TOO_LARGE);
        return;
      }
      c->parsed = c->in.len;
      return;
    }
    if (err == HPE_PAUSED && c->complete) {
      const char *pos = llhttp_get_error_pos(&c->parser);
      if (!took_llhttp(c, (size_t)(pos - c->in.base))) return;
      continue;
    }
    conn_fail(c, c->failure ? c->failure : EPHD_PEER_E_MALFORMED);
    return;
  }
  /* Bytes after the last answer owed: nothing can be told from them. */
  if (c->req == NULL && c->taken < c->in.len) {
    pipe_drop(c, EPHD_PEER_E_MALFORMED, 0);
    return;
  }
  compact(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = s->data;
  (void)buf;
  if (nread == 0 || c->state == C_CLOSED) return;
  if (c->req == NULL) {
    /* Nothing is owed on it: bytes are a confused peer, EOF or an error a
     * peer that let it go. */
    if (c->pipe)
      pipe_drop(c, EPHD_PEER_E_CLOSED, 0);
    else
      conn_close(c);
    return;
  }
  if (nread < 0) {
    /* A body that runs to the end of the connection ends here, and so
     * does the connection. */
    if (nread == UV_EOF && c->llhttp_on) {
      llhttp_finish(&c->parser);
      if (c->complete) {
        c->keep_alive = 0;
        took_llhttp(c, c->in.len);
        return;
      }
    }
    conn_fail(c, EPHD_PEER_E_CLOSED);
    return;
  }
  c->got_bytes = 1;
  c->quiet = 0;
  c->in.len += (size_t)nread;
  read_ns = uv_hrtime();
  read_answers(c);
  read_ns = 0;
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
  memset(&flushes, 0, sizeof(flushes));
  relayed_this_turn = 0;
  flush_held = 0;
  uv_check_init(loop, &flush_check);
  uv_check_start(&flush_check, on_flush_check);
  uv_unref((uv_handle_t *)&flush_check);
  uv_idle_init(loop, &flush_idle);
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
  ephd_map_init(&p->shares);
  if (parse_address(p, address) < 0) {
    free(p->authority);
    free(p->name);
    free(p);
    return NULL;
  }
  p->refs = 1;
  uv_timer_init(loop, &p->timer);
  p->timer.data = p;
  for (int i = 0; i < MAX_PIPES; i++) p->pipes[i].peer = p;
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
  int head = req->method.len == 4 && memcmp(req->method.ptr, "HEAD", 4) == 0;
  int lane = req->key && !req->parks && !head ? LANE_PIPE
             : req->parks                     ? LANE_PARKS
                                              : LANE_SHORT;
  /* Refused when it would wait behind max_queued others: those that the
   * lane's free slots will take at once do not count. A peer's pipes hold
   * as many as its short lane. */
  int full;
  if (lane == LANE_PIPE) {
    full = p->piped >= (uint64_t)limits.max_conns + limits.max_queued;
  } else {
    uint32_t cap = lane_cap(lane), busy = p->busy[lane];
    uint64_t free_slots = busy < cap ? cap - busy : 0;
    full = p->queue[lane].count >= limits.max_queued + free_slots;
  }
  if (full) {
    stats.failures[-EPHD_PEER_E_QUEUE_FULL]++;
    return EPHD_PEER_E_QUEUE_FULL;
  }
  share_t *share = NULL;
  if (lane == LANE_PARKS && req->share) {
    share =
        ephd_map_get(&p->shares, (const char *)&req->share, sizeof(uint64_t));
    if (share && share->count >= limits.max_parked_share) {
      stats.failures[-EPHD_PEER_E_SHARE]++;
      return EPHD_PEER_E_SHARE;
    }
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
    r->release = req->release;
    r->lender = data;
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
  r->head = head;
  if (lane == LANE_PARKS && req->share) {
    if (share == NULL && (share = calloc(1, sizeof(*share)))) {
      share->tag = req->share;
      ephd_map_put(&p->shares, (const char *)&share->tag, sizeof(uint64_t),
                   share);
    }
    /* Without memory for one, uncounted: the lane's bound still holds. */
    if (share) share->count++;
    r->share = share;
  }
  /* A pipe's request is timed from its write. */
  if (lane != LANE_PIPE) r->sent_ns = uv_hrtime();
  stats.requests++;
  live++;
  *out = r;
  if (lane == LANE_PIPE) {
    pipe_t *pp = &p->pipes[req->key % npipes()];
    r->pipe = pp;
    r->deadline = uv_now(loop) + req->timeout_ms;
    r->state = R_PIPED;
    ephd_list_append(&pp->unwritten, &r->link);
    p->piped++;
    stats.in_flight++;
    stats.pipelined++;
    peer_timer_at(p, r->deadline);
    relayed_this_turn = 1;
    if (pp->conn && pp->conn->state == C_BUSY)
      flush_later(pp);
    else
      pipe_connect(pp);
    return 0;
  }
  r->state = R_QUEUED;
  uv_timer_init(loop, &r->timer);
  r->timer.data = r;
  uv_timer_start(&r->timer, on_request_timer, req->timeout_ms, 0);
  ephd_list_append(&p->queue[lane], &r->link);
  stats.queued++;
  pump(p);
  return 0;
}

void ephd_peer_ignore(void *data, int result, const ephd_peer_response_t *res) {
  (void)data;
  (void)result;
  (void)res;
}

int ephd_peer_cancel(ephd_peer_call_t *r) {
  if (r == NULL || r->state == R_DONE || r->state == R_ORPHAN) return 0;
  ephd_peer_t *p = r->peer;
  stats.cancelled++;
  if (r->state == R_WRITTEN) return pipe_orphan(r);
  detach(r);
  if (r->lane == LANE_PIPE) free(r);
  pump(p);
  return 0;
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
    pipes_stop(p);
    while (p->idle.head) conn_close(conn_of(p->idle.head));
  }
  drain_done = NULL;
  uv_close((uv_handle_t *)&drain_timer, NULL);
  memset(&flushes, 0, sizeof(flushes));
  uv_close((uv_handle_t *)&flush_check, NULL);
  uv_close((uv_handle_t *)&flush_idle, NULL);
  ephd_peer_t *p = peers;
  peers = NULL;
  while (p) {
    ephd_peer_t *next = p->next;
    if (p->resolving) uv_cancel((uv_req_t *)&p->gai);
    uv_close((uv_handle_t *)&p->timer, on_peer_timer_closed);
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
    [-EPHD_PEER_E_SHARE] = "share",
};

const char *ephd_peer_kind_name(int kind) {
  return kind <= 0 && kind > -EPHD_PEER_NKINDS ? kind_names[-kind] : "unknown";
}
