#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_head.h"
#include "json.h"
#include "list.h"
#include "llhttp.h"
#include "log.h"

/* Offsets from the connection's base: the buffer may move. */
typedef ephd_head_span_t span_t;

enum { H_NONE, H_FIELD, H_VALUE };

struct ephd_deferred {
  const ephd_deferred_ops_t *ops;
  void *data;
};

/* The lines a connection may wait on (line_t, below): its answers, to be
 * written at the end of the loop turn, and its held request's turn. */
enum { LINE_FLUSH, LINE_TURN, N_LINES };

struct ephd_conn {
  uv_tcp_t tcp;
  uv_timer_t timer; /* the one deadline the connection is under (arm) */
  llhttp_t parser;
  /* What is being parsed: the shared read buffer, or `in` when a request
   * spans reads. Spans are offsets from base. */
  const char *base;
  size_t end;         /* bytes at base */
  size_t parsed;      /* bytes of base already given to llhttp */
  size_t msg_start;   /* where the message in progress (or unparsed) begins */
  ephd_buf_t in;      /* a partial request's bytes, kept across reads */
  ephd_buf_t out;     /* answers waiting to be written */
  ephd_buf_t wbuf;    /* the answers a uv_write has in flight */
  ephd_buf_t chunked; /* a chunked body, reassembled */
  uv_write_t wreq;
  span_t url, field, value, body;
  span_t headers[EPHD_N_HEADERS];
  unsigned headers_seen; /* a bit per EPHD_HDR_ */
  int hstate;
  int head; /* a HEAD request: its answer has no body */
  int body_chunked;
  int expect_continue;
  int keep_alive; /* of the request being answered */
  int http10;
  int answered;
  int in_flight; /* a request was dispatched and is not finished yet */
  int held;      /* ... and is held, to be answered later (deferred) */
  int closing;   /* close once out is written */
  int closed;
  int writing;
  int reading;
  int output_paused; /* parsing waits for unwritten answers to drain */
  int sent_all;      /* the client shut its sending side while paused */
  int open_handles;
  int turn_on_drain; /* ... once what it streamed so far is written */
  int streaming;     /* its answer is being sent as it is made */
  int peer;     /* a member of the cell's: its session opened (cell/mark.h) */
  int refuse;   /* 400, 413 or 431 when a check of ours stopped the parser */
  int repeated; /* the EPHD_HDR_ whose repetition was refused; -1: a name's
                 * trailing whitespace was */
  int route;    /* the metrics' route of the request being answered */
  int code;     /* its error code; EPHD_CODE_COUNT: not an error */
  int status;   /* of the answer being written */
  uint64_t started; /* when the request's last byte was read */
  /* The deadline the connection is under (see arm), and when the request
   * being read began and had its headers, which its deadlines count from. */
  int deadline_kind;
  uint64_t deadline, timer_due;
  int timer_armed;
  int in_body;
  uint64_t began_ms, headers_ms;
  size_t len_field; /* where the Content-Length digits go in out */
  size_t body_start;
  struct {
    ephd_request_t pub;
    ephd_conn_t *conn;
  } req;
  ephd_deferred_t deferred;       /* what holds the request, while held */
  ephd_node_t link;               /* in conns: every connection, for shutdown */
  ephd_node_t resume_link;        /* answered held requests with bytes left */
  ephd_node_t line_link[N_LINES]; /* its place on each line (below) */
  size_t held_bytes;              /* its buffers' capacity, as last counted */
  size_t deferred_bytes; /* what the holder of its request keeps for it */
};

static uv_loop_t *loop;
static uv_tcp_t listener;
static int listening;
static ephd_http_limits_t limits;
static ephd_http_handlers_t handlers;
static llhttp_settings_t settings;
static char shared_in[65536];
/* What an idle connection keeps of its answer buffers for the next answer:
 * more is given back once written, so a connection that once had a big
 * answer does not pin it while idle. */
#define IDLE_KEEP_BYTES (64 * 1024)
/* A connection that cannot parse further (a request held, or parsing
 * paused while its answers are unwritten) reads on until it holds this much
 * unparsed input, then stops. Reading on is how a held request (a parked
 * long poll, a database write) learns at once that its client went away;
 * stopping is what keeps a client streaming behind it from growing the
 * broker without bound (nginx and Redis bound a client's unparsed input the
 * same way). */
#define STALLED_INPUT_BYTES sizeof(shared_in)
static ephd_list_t conns;
/* What every connection's buffers hold together, by their capacity (what
 * the heap gave them), against limits.max_client_bytes: each connection's
 * input, answers and body are bounded on their own, but ten thousand
 * connections each sending a large body are not. Past it the connection
 * holding the most is closed (Redis's maxmemory-clients), once per loop
 * turn after the reads: the bound is overshot by at most one turn's reads.
 * The shared read buffer is counted by nobody: it is always there. */
static size_t client_bytes;
static uint64_t evicted;
static uint64_t activity;   /* requests dispatched and connections closed */
static ephd_list_t resumes; /* the last asked first */
static uv_idle_t resume_idle;

/* A line of connections, first come first served, each on it at most
 * once, with a link of its own in every connection. */
typedef ephd_list_t line_t;

static int on_line(line_t *l, int which, ephd_conn_t *c) {
  return ephd_list_has(l, &c->line_link[which]);
}

static void line_push(line_t *l, int which, ephd_conn_t *c) {
  ephd_list_append(l, &c->line_link[which]);
}

static ephd_conn_t *line_pop(line_t *l, int which) {
  ephd_node_t *n = l->head;
  if (n == NULL) return NULL;
  ephd_list_remove(l, n);
  return EPHD_ENTRY(n - which, ephd_conn_t, line_link); /* &line_link[0] */
}

static void line_remove(line_t *l, int which, ephd_conn_t *c) {
  if (on_line(l, which, c)) ephd_list_remove(l, &c->line_link[which]);
}

/* Held requests answered a slice at a time: one slice a loop turn, in the
 * order they asked, so a long answer never holds the loop for long. */
static line_t turn_line;
static uv_idle_t turn_idle;
/* Answers are written after every ready socket of a loop turn has been read
 * and dispatched, not one by one: a client woken by the first answer of a
 * turn finds the rest already there, and the cross-core wake-ups this saves
 * were a fifth of a small push's cost (Redis writes in beforeSleep for the
 * same reason). */
static line_t flush_line;
static uv_check_t flush_check;
/* Active while answers wait: an answer made outside the poll phase (a
 * held request's deadline, in a timer) must not wait for the next poll to
 * end by itself, which could be a second away; an active idle handle makes
 * that poll return at once. */
static uv_idle_t flush_idle;

static void on_flush_idle(uv_idle_t *h) { (void)h; }

#define LEN_DIGITS 10

static void process(ephd_conn_t *c);
static void flush(ephd_conn_t *c);
static void conn_close(ephd_conn_t *c);
static void on_resume(uv_idle_t *h);
static void release_chunked(ephd_conn_t *c);

/* Answers made and not yet taken by the kernel: waiting, and in flight. */
static size_t unwritten(const ephd_conn_t *c) {
  return c->out.len + c->wbuf.len;
}

static int stalled(const ephd_conn_t *c) { return c->held || c->output_paused; }

/* At every flush: each read and each answer is followed by one in the
 * same loop turn, and an answer handed to uv_write is counted until its
 * client has taken it (a client that never reads holds it). */
static void recount(ephd_conn_t *c) {
  if (c->closed) return;
  size_t held =
      c->in.cap + c->out.cap + c->wbuf.cap + c->chunked.cap + c->deferred_bytes;
  client_bytes = client_bytes - c->held_bytes + held;
  c->held_bytes = held;
}

/* The largest first, as one closed connection gives back most; a scan of
 * every connection, but only while past the bound, which each eviction
 * takes a whole connection's share off. */
static void evict_while_over(void) {
  static uint64_t logged_ms;
  while (limits.max_client_bytes && client_bytes > limits.max_client_bytes) {
    ephd_conn_t *big = NULL;
    for (ephd_node_t *n = conns.head; n; n = n->next) {
      ephd_conn_t *c = EPHD_ENTRY(n, ephd_conn_t, link);
      if (!c->closed && (!big || c->held_bytes > big->held_bytes)) big = c;
    }
    if (big == NULL || big->held_bytes == 0) return;
    evicted++;
    uint64_t now = uv_now(loop);
    if (now - logged_ms >= 1000 || logged_ms == 0) {
      logged_ms = now;
      char held[24], total[24], count[24];
      snprintf(held, sizeof(held), "%zu", big->held_bytes);
      snprintf(total, sizeof(total), "%zu", client_bytes);
      snprintf(count, sizeof(count), "%llu", (unsigned long long)evicted);
      ephd_log("warn", "client_evicted", "held_bytes", held, "client_bytes",
               total, "evicted_total", count, "msg",
               "the connections' buffers were past "
               "QUEEN_EPHEMERAL_MAX_CLIENT_BYTES: closed the largest",
               NULL);
    }
    conn_close(big);
  }
}

/* Parsing resumes later, never inside the call that allowed it (an answer
 * may be made inside another connection's dispatch). */
static void resume_later(ephd_conn_t *c) {
  if (ephd_list_has(&resumes, &c->resume_link) || c->closing || c->closed)
    return;
  ephd_list_prepend(&resumes, &c->resume_link);
  uv_idle_start(&resume_idle, on_resume);
}

/* In the order answers were made: a parked pop woken by a push leaves
 * before the push's own 201. */
static void flush_later(ephd_conn_t *c) {
  if (c->closed) return;
  /* Stopped, the idle handle is gone: an answer that ends after the stop
   * (a relay finishing) is written at once. */
  if (!listening) {
    flush(c);
    return;
  }
  if (on_line(&flush_line, LINE_FLUSH, c)) return;
  line_push(&flush_line, LINE_FLUSH, c);
  if (!uv_is_active((uv_handle_t *)&flush_idle))
    uv_idle_start(&flush_idle, on_flush_idle);
}

static void on_flush_check(uv_check_t *h) {
  (void)h;
  uv_idle_stop(&flush_idle);
  ephd_conn_t *c;
  while ((c = line_pop(&flush_line, LINE_FLUSH))) flush(c);
  evict_while_over();
}

/* The connection's one timer serves four deadlines in turn (headers, body,
 * idle, and a held request's own, such as a long poll's timeout): a
 * connection is only ever in one of these states. A slow client costs its
 * socket until the deadline, no more.
 *
 * Requests come and go far more often than deadlines pass, so a deadline
 * moved later leaves the timer where it is: when it fires early it re-arms
 * for what is left. Only a deadline earlier than the armed one touches the
 * timer heap, which was a tenth of a small push's instructions when every
 * request stopped and started it three times. */
enum { DEADLINE_NONE, DEADLINE_REQUEST, DEADLINE_IDLE, DEADLINE_DEFERRED };

static void on_deadline(uv_timer_t *t);

static void arm(ephd_conn_t *c, int kind, uint64_t deadline) {
  if (c->closed) return;
  c->deadline_kind = kind;
  c->deadline = deadline;
  if (c->timer_armed && c->timer_due <= deadline) return;
  uint64_t now = uv_now(loop);
  c->timer_armed = 1;
  c->timer_due = deadline;
  uv_timer_start(&c->timer, on_deadline, deadline > now ? deadline - now : 0,
                 0);
}

/* The answer's head up to the Content-Length digits, with the digits'
 * room, kept per status for JSON (every route but metrics and the
 * dashboard): built the first time a status is answered, then one copy. */
#define HEAD_MAX 128
typedef struct {
  uint8_t len;
  char text[HEAD_MAX];
} head_t;
static head_t json_heads[500];

/* The status line and Content-Type, up to the end of its line. */
static void append_status(ephd_buf_t *o, int status, const char *content_type) {
  ephd_buf_appends(o, "HTTP/1.1 ");
  ephd_buf_append_u64(o, (uint64_t)status);
  ephd_buf_append(o, " ", 1);
  ephd_buf_appends(o, ephd_status_reason(status));
  ephd_buf_appends(o, "\r\nContent-Type: ");
  ephd_buf_appends(o, content_type);
}

static void append_head(ephd_buf_t *o, int status, const char *content_type) {
  append_status(o, status, content_type);
  ephd_buf_appends(o, "\r\nContent-Length: ");
  /* The length is written once the body is: digits padded with leading
   * spaces (optional whitespace in HTTP), so the body is built in place. */
  memset(ephd_buf_reserve(o, LEN_DIGITS), ' ', LEN_DIGITS);
  o->len += LEN_DIGITS;
}

static void append_json_head(ephd_buf_t *o, int status) {
  if (status < 100 || status >= 600) {
    append_head(o, status, "application/json");
    return;
  }
  head_t *h = &json_heads[status - 100];
  if (h->len == 0) {
    size_t start = o->len;
    append_head(o, status, "application/json");
    size_t n = o->len - start;
    if (n <= HEAD_MAX) {
      memcpy(h->text, o->base + start, n);
      h->len = (uint8_t)n;
    }
    return;
  }
  ephd_buf_append(o, h->text, h->len);
}

/* content_type NULL: application/json. */
static ephd_buf_t *begin(ephd_conn_t *c, int status, const char *extra,
                         const char *content_type) {
  ephd_buf_t *o = &c->out;
  c->answered = 1;
  c->status = status;
  c->code = EPHD_CODE_COUNT;
  if (content_type == NULL)
    append_json_head(o, status);
  else
    append_head(o, status, content_type);
  c->len_field = o->len - LEN_DIGITS;
  /* The usual end: no extra headers, a kept HTTP/1.1 connection. */
  if (!extra && c->keep_alive && !c->http10) {
    ephd_buf_append(o, "\r\n\r\n", 4);
    c->body_start = o->len;
    return o;
  }
  ephd_buf_append(o, "\r\n", 2);
  if (extra) ephd_buf_appends(o, extra);
  if (!c->keep_alive)
    ephd_buf_appends(o, "Connection: close\r\n");
  else if (c->http10)
    ephd_buf_appends(o, "Connection: keep-alive\r\n");
  ephd_buf_append(o, "\r\n", 2);
  c->body_start = o->len;
  return o;
}

ephd_buf_t *ephd_http_begin(ephd_conn_t *c, int status, const char *extra) {
  return begin(c, status, extra, NULL);
}

ephd_buf_t *ephd_http_begin_error(ephd_conn_t *c, ephd_code_t code, int status,
                                  const char *extra) {
  ephd_buf_t *o = begin(c, status, extra, NULL);
  c->code = (int)code;
  return o;
}

ephd_buf_t *ephd_http_begin_as(ephd_conn_t *c, int status, const char *extra,
                               const char *content_type) {
  return begin(c, status, extra, content_type);
}

/* The request is done with: answered, or its client gone. */
static void finish(ephd_conn_t *c) {
  if (!c->in_flight) return;
  c->in_flight = 0;
  if (handlers.finished) handlers.finished(&c->req.pub);
}

/* What ends every answer, once its bytes are in out. */
static void end_answer(ephd_conn_t *c) {
  if (handlers.answered)
    handlers.answered(c->route, c->status, c->code, uv_hrtime() - c->started);
  if (!c->keep_alive) c->closing = 1;
  if (c->held) {
    /* A held request was answered, possibly inside another connection's
     * dispatch: its deadline and its handle end here. */
    c->held = 0;
    c->deferred.ops = NULL;
    c->deferred.data = NULL;
    c->deferred_bytes = 0;
    if (c->deadline_kind == DEADLINE_DEFERRED) c->deadline_kind = DEADLINE_NONE;
    release_chunked(c);
    resume_later(c);
  }
  flush_later(c);
  finish(c);
}

void ephd_http_end(ephd_conn_t *c) {
  size_t n = c->out.len - c->body_start;
  char *digits = c->out.base + c->len_field;
  for (int i = LEN_DIGITS - 1; i >= 0; i--) {
    digits[i] = (char)('0' + n % 10);
    n /= 10;
    if (n == 0) break;
  }
  /* HEAD: the headers a GET would have had, Content-Length included
   * (RFC 9110 9.3.2), and no body bytes. */
  if (c->head) c->out.len = c->body_start;
  end_answer(c);
}

/* --- a streamed answer ----------------------------------------------------
 * An answer too long to make at once (a tenant's list of 100,000 queues,
 * 27 MB) is sent as it is made, a chunk a turn: chunked to an HTTP/1.1
 * client, delimited by the close to an HTTP/1.0 one, and to a HEAD the
 * headers a GET would have had. A turn is given only once what was sent
 * before is written (ephd_deferred_turn), so a connection holds one
 * chunk past its bound of unwritten answers however long the answer, and
 * a client that stops reading is closed at the idle timeout. */

void ephd_deferred_stream(ephd_deferred_t *d, int status) {
  ephd_conn_t *c = ephd_deferred_conn(d);
  ephd_buf_t *o = &c->out;
  c->answered = 1;
  c->status = status;
  c->code = EPHD_CODE_COUNT;
  c->streaming = 1;
  append_status(o, status, "application/json");
  ephd_buf_append(o, "\r\n", 2);
  if (c->http10)
    c->keep_alive = 0;
  else
    ephd_buf_appends(o, "Transfer-Encoding: chunked\r\n");
  if (!c->keep_alive) ephd_buf_appends(o, "Connection: close\r\n");
  ephd_buf_append(o, "\r\n", 2);
  flush_later(c);
}

void ephd_deferred_chunk(ephd_deferred_t *d, const char *bytes, size_t len) {
  ephd_conn_t *c = ephd_deferred_conn(d);
  if (len == 0 || c->head) return;
  if (!c->http10) {
    char size[24];
    ephd_buf_append(&c->out, size,
                    (size_t)snprintf(size, sizeof(size), "%zx\r\n", len));
  }
  ephd_buf_append(&c->out, bytes, len);
  if (!c->http10) ephd_buf_append(&c->out, "\r\n", 2);
  flush_later(c);
}

void ephd_deferred_stream_end(ephd_deferred_t *d) {
  ephd_conn_t *c = ephd_deferred_conn(d);
  if (!c->head && !c->http10) ephd_buf_appends(&c->out, "0\r\n\r\n");
  c->streaming = 0;
  end_answer(c);
}

void ephd_ffi_respond_as(const ephd_request_t *req, int status,
                         const char *content_type, const char *body,
                         size_t len) {
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_append(ephd_http_begin_as(c, status, NULL, content_type), body, len);
  ephd_http_end(c);
}

void ephd_ffi_respond(const ephd_request_t *req, int status,
                      const char *extra_headers, const char *body, size_t len) {
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_append(ephd_http_begin(c, status, extra_headers), body, len);
  ephd_http_end(c);
}

static void log_refused(int status, ephd_code_t code, const char *message) {
  if (!limits.log_refusals) return;
  char s[8];
  snprintf(s, sizeof(s), "%d", status);
  ephd_log("info", "refused", "status", s, "code", ephd_code_name(code),
           "error", message, NULL);
}

/* C's refusals of a request under way (a Lua fault, a write that failed):
 * no identity at hand, the refusal log's line has none. */
void ephd_http_refuse(ephd_conn_t *c, ephd_code_t code, const char *message) {
  ephd_error_write(ephd_http_begin_error(c, code, ephd_code_status(code), NULL),
                   code, message);
  log_refused(ephd_code_status(code), code, message);
  ephd_http_end(c);
}

void ephd_ffi_refuse(const ephd_request_t *req, int code, int status,
                     const char *extra_headers, const char *body, size_t len) {
  ephd_conn_t *c = ephd_http_conn(req);
  if (code < 0 || code >= EPHD_CODE_COUNT) code = EPHD_CODE_COUNT;
  ephd_buf_append(ephd_http_begin_error(c, code, status, extra_headers), body,
                  len);
  ephd_http_end(c);
}

/* The HTTP layer's own refusals carry the family's shape code with a status
 * of their own. */
static void respond_error(ephd_conn_t *c, int status, const char *error) {
  ephd_error_write(
      ephd_http_begin_error(c, EPHD_CODE_EPHEMERAL_BAD_REQUEST, status, NULL),
      EPHD_CODE_EPHEMERAL_BAD_REQUEST, error);
  /* Before any route or identity: the refusal log's line has neither. */
  log_refused(status, EPHD_CODE_EPHEMERAL_BAD_REQUEST, error);
  ephd_http_end(c);
}

void ephd_ffi_request_route(const ephd_request_t *req, int idx) {
  ephd_http_conn(req)->route = idx;
}

ephd_conn_t *ephd_http_conn(const ephd_request_t *req) {
  return ((const struct {
           ephd_request_t pub;
           ephd_conn_t *conn;
         } *)req)
      ->conn;
}

int ephd_http_peer(const ephd_request_t *req) {
  return ephd_http_conn(req)->peer;
}

void ephd_http_trust_peer(const ephd_request_t *req) {
  ephd_http_conn(req)->peer = 1;
}

ephd_deferred_t *ephd_http_defer(const ephd_request_t *req,
                                 const ephd_deferred_ops_t *ops, void *data) {
  ephd_conn_t *c = ephd_http_conn(req);
  c->held = 1;
  c->answered = 1;
  c->deferred.ops = ops;
  c->deferred.data = data;
  return &c->deferred;
}

ephd_conn_t *ephd_deferred_conn(ephd_deferred_t *d) {
  return (ephd_conn_t *)((char *)d - offsetof(ephd_conn_t, deferred));
}

static void on_turn(uv_idle_t *h) {
  /* Every connection that asked may have closed since (conn_close takes
   * it off the line). */
  ephd_conn_t *c = line_pop(&turn_line, LINE_TURN);
  if (turn_line.head == NULL) uv_idle_stop(h);
  if (c) c->deferred.ops->turn(c->deferred.data);
}

void ephd_deferred_turn(ephd_deferred_t *d) {
  ephd_conn_t *c = ephd_deferred_conn(d);
  /* At the broker's stop every held request is being cut off: none gets
   * a turn (the idle handle is closing). */
  if (on_line(&turn_line, LINE_TURN, c) || c->closed ||
      uv_is_closing((uv_handle_t *)&turn_idle))
    return;
  if (c->streaming && unwritten(c) > limits.max_unwritten_bytes) {
    /* The client has not taken what was streamed: the turn waits for it
     * (flush), and a client that takes nothing is closed when idle. */
    c->turn_on_drain = 1;
    arm(c, DEADLINE_IDLE, uv_now(loop) + limits.idle_timeout_ms);
    return;
  }
  line_push(&turn_line, LINE_TURN, c);
  uv_idle_start(&turn_idle, on_turn);
}

void ephd_deferred_account(ephd_deferred_t *d, size_t bytes) {
  ephd_conn_t *c = ephd_deferred_conn(d);
  c->deferred_bytes = bytes;
  recount(c);
}

void ephd_deferred_deadline(ephd_deferred_t *d, uint64_t at_ms) {
  arm(ephd_deferred_conn(d), DEADLINE_DEFERRED, at_ms);
}

size_t ephd_http_connections(void) { return conns.count; }

size_t ephd_http_client_bytes(void) { return client_bytes; }

uint64_t ephd_http_evicted(void) { return evicted; }

int ephd_http_port(void) {
  struct sockaddr_storage addr;
  int len = sizeof(addr);
  if (!listening ||
      uv_tcp_getsockname(&listener, (struct sockaddr *)&addr, &len) != 0)
    return -1;
  if (addr.ss_family == AF_INET6)
    return ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
  return ntohs(((struct sockaddr_in *)&addr)->sin_port);
}

uint64_t ephd_http_activity(void) { return activity; }

/* --- parsing ----------------------------------------------------------- */

static ephd_conn_t *of(llhttp_t *p) { return p->data; }

static void extend(span_t *s, ephd_conn_t *c, const char *at, size_t len,
                   int fresh) {
  if (fresh) {
    s->off = (size_t)(at - c->base);
    s->len = 0;
  }
  s->len += len;
}

/* A message begins: nothing of the last one's is read as its. */
static void message_begin(ephd_conn_t *c) {
  c->in_body = 0;
  span_t none = {0, 0};
  c->url = c->field = c->value = c->body = none;
  for (int i = 0; i < EPHD_N_HEADERS; i++) c->headers[i] = none;
  c->headers_seen = 0;
  c->head = 0;
  c->refuse = 0;
  c->hstate = H_NONE;
  c->body_chunked = 0;
  c->expect_continue = 0;
  c->chunked.len = 0;
}

static int on_message_begin(llhttp_t *p) {
  message_begin(of(p));
  return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len) {
  ephd_conn_t *c = of(p);
  extend(&c->url, c, at, len, c->url.len == 0);
  return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  ephd_conn_t *c = of(p);
  extend(&c->field, c, at, len, c->hstate != H_FIELD);
  c->hstate = H_FIELD;
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  ephd_conn_t *c = of(p);
  extend(&c->value, c, at, len, c->hstate != H_VALUE);
  c->hstate = H_VALUE;
  return 0;
}

static int on_header_value_complete(llhttp_t *p) {
  ephd_conn_t *c = of(p);
  if (c->in_body) {
    /* A chunked body's trailer fields are not the request's headers (RFC
     * 9110 6.5.1): a proxy that checks or sets the head's identity never
     * looks past the body, so a tenant or Authorization read here would be
     * the client's own pick. They are framing, bounded with the body. */
    c->hstate = H_NONE;
    return 0;
  }
  if (c->hstate != H_VALUE) c->value.len = 0; /* an empty value */
  c->value.len = ephd_head_trimmed(c->base + c->value.off, c->value.len);
  c->hstate = H_NONE;
  const char *f = c->base + c->field.off;
  /* RFC 9112 5.1: whitespace between a field name and its colon is a 400;
   * a proxy that trims it would read a header this broker ignored. */
  if (c->field.len &&
      (f[c->field.len - 1] == ' ' || f[c->field.len - 1] == '\t')) {
    c->refuse = 400;
    c->repeated = -1;
    return HPE_USER;
  }
  int h = ephd_head_header_of(f, c->field.len);
  if (h >= 0) {
    /* Twice is refused, as a repeated Content-Length is: which one counts
     * would otherwise be up to each hop (the first, the last, both
     * joined), and a proxy that appends an identity header would hand the
     * choice to the client. */
    if (c->headers_seen & (1u << h)) {
      c->refuse = 400;
      c->repeated = h;
      return HPE_USER;
    }
    c->headers_seen |= 1u << h;
    c->headers[h] = c->value;
  } else if (c->field.len == 6 && strncasecmp(f, "expect", 6) == 0 &&
             c->value.len == 12 &&
             strncasecmp(c->base + c->value.off, "100-continue", 12) == 0) {
    c->expect_continue = 1;
  }
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  ephd_conn_t *c = of(p);
  c->headers_ms = uv_now(loop);
  c->in_body = 1;
  c->head = p->method == HTTP_HEAD;
  c->body_chunked = (p->flags & F_CHUNKED) != 0;
  if ((p->flags & F_CONTENT_LENGTH) &&
      p->content_length > limits.max_body_bytes) {
    c->refuse = 413;
    return -1;
  }
  if (c->expect_continue && !c->closing) {
    ephd_buf_appends(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
    flush(c);
  }
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  ephd_conn_t *c = of(p);
  if (c->body.len + c->chunked.len + len > limits.max_body_bytes) {
    c->refuse = 413;
    return HPE_USER;
  }
  if (c->body_chunked) {
    /* Chunk framing interleaves the data, so only this case copies. */
    ephd_buf_append(&c->chunked, at, len);
    return 0;
  }
  extend(&c->body, c, at, len, c->body.len == 0);
  return 0;
}

static ephd_slice_t slice(ephd_conn_t *c, span_t s) {
  ephd_slice_t out = {s.len ? c->base + s.off : "", s.len};
  return out;
}

ephd_slice_t ephd_http_scan_frame(const ephd_request_t *req) {
  ephd_conn_t *c = ephd_http_conn(req);
  return slice(c, c->headers[EPHD_HDR_SCAN]);
}

/* RFC 9112 3.2.2: a server accepts a target in absolute form (what a
 * proxy sends), whose path and query follow the authority. */
static ephd_slice_t origin_form(ephd_slice_t url) {
  if (url.len && url.ptr[0] == '/') return url; /* what nearly all send */
  size_t skip = 0;
  if (url.len > 7 && strncasecmp(url.ptr, "http://", 7) == 0)
    skip = 7;
  else if (url.len > 8 && strncasecmp(url.ptr, "https://", 8) == 0)
    skip = 8;
  if (skip == 0) return url;
  const char *p = url.ptr + skip, *end = url.ptr + url.len;
  while (p < end && *p != '/' && *p != '?') p++;
  ephd_slice_t rest = {p, (size_t)(end - p)};
  return rest;
}

/* A chunked body, reassembled, is the one body the connection copies: it
 * is given back once its request is answered (nothing keeps a pointer
 * into it past that), or an idle keep-alive connection would hold its
 * biggest body for as long as it stays. */
static void release_chunked(ephd_conn_t *c) {
  c->chunked.len = 0;
  ephd_buf_shrink(&c->chunked, 0);
}

/* A whole request, however it was read, is answered or held. */
static void dispatch(ephd_conn_t *c, const char *method, int keep_alive,
                     int http10) {
  ephd_request_t *r = &c->req.pub;
  r->method.ptr = method;
  r->method.len = strlen(method);
  ephd_slice_t url = origin_form(slice(c, c->url));
  const char *q = memchr(url.ptr, '?', url.len);
  r->path.ptr = url.ptr;
  r->path.len = q ? (size_t)(q - url.ptr) : url.len;
  r->query.ptr = q ? q + 1 : "";
  r->query.len = q ? url.len - r->path.len - 1 : 0;
  if (r->path.len == 0) { /* http://host?query is http://host/?query */
    r->path.ptr = "/";
    r->path.len = 1;
  }
  if (c->body_chunked) {
    r->body.ptr = c->chunked.base ? c->chunked.base : "";
    r->body.len = c->chunked.len;
  } else {
    r->body = slice(c, c->body);
  }
  r->tenant = slice(c, c->headers[EPHD_HDR_TENANT]);
  r->authorization = slice(c, c->headers[EPHD_HDR_AUTHORIZATION]);
  r->content_type = slice(c, c->headers[EPHD_HDR_CONTENT_TYPE]);
  r->json = r->content_type.len == 16 &&
            memcmp(r->content_type.ptr, "application/json", 16) == 0;
  r->origin = slice(c, c->headers[EPHD_HDR_ORIGIN]);
  r->host = slice(c, c->headers[EPHD_HDR_HOST]);
  r->fetch_site = slice(c, c->headers[EPHD_HDR_FETCH_SITE]);
  r->forward = slice(c, c->headers[EPHD_HDR_FORWARD]);
  r->session = slice(c, c->headers[EPHD_HDR_SESSION]);
  c->keep_alive = keep_alive;
  c->http10 = http10;
  c->answered = 0;
  c->route = 0;
  c->started = uv_hrtime();
  /* A complete request is answered or held: neither is under a deadline of
   * the connection's (a held one may set its own). */
  c->deadline_kind = DEADLINE_NONE;
  c->in_body = 0;
  activity++;
  c->in_flight = 1;
  handlers.dispatch(r);
  if (!c->answered) {
    /* The Lua host answers its own failures; this only guards the wire. */
    ephd_http_refuse(c, EPHD_CODE_EPHEMERAL_UNAVAILABLE,
                     "the request was not answered");
  }
  if (!c->held) release_chunked(c);
}

static int on_message_complete(llhttp_t *p) {
  dispatch(of(p), llhttp_method_name((llhttp_method_t)p->method),
           llhttp_should_keep_alive(p),
           p->http_major == 1 && p->http_minor == 0);
  return HPE_PAUSED;
}

static span_t moved(ephd_head_span_t s, size_t by) {
  span_t out = {s.off + by, s.len};
  return out;
}

/* A plain message, read whole in one pass (http_head.c), gives the request
 * llhttp's callbacks would have gathered; llhttp, which has not seen it,
 * still stands at a message's start. Returns the message's length, or 0:
 * llhttp reads it. */
static size_t read_plain(ephd_conn_t *c) {
  ephd_plain_t m;
  size_t at = c->parsed;
  size_t n =
      ephd_head_read_plain(c->base + at, c->end - at, limits.max_header_bytes,
                           limits.max_body_bytes, &m);
  if (n == 0) return 0;
  message_begin(c);
  c->headers_ms = c->began_ms;
  c->url = moved(m.url, at);
  c->body = moved(m.body, at);
  c->headers_seen = m.seen;
  for (int h = 0; h < EPHD_N_HEADERS; h++)
    if (m.seen & (1u << h)) c->headers[h] = moved(m.headers[h], at);
  dispatch(c, m.method, m.keep_alive, 0);
  return n;
}

static int chunked_past_bound(const ephd_conn_t *c);
static size_t message_bound(void);

/* The limits' refusals name the limit and the knob that sets it, so the
 * client (or its operator) knows what to change. */
static void refuse_over(ephd_conn_t *c, int status) {
  char msg[160];
  if (status == 431)
    snprintf(msg, sizeof(msg),
             "the request head is over %zu bytes "
             "(QUEEN_EPHEMERAL_MAX_HEADER_BYTES)",
             limits.max_header_bytes);
  else if (chunked_past_bound(c))
    snprintf(msg, sizeof(msg),
             "the chunked request is over %zu bytes with its framing "
             "(QUEEN_EPHEMERAL_MAX_HEADER_BYTES plus twice "
             "QUEEN_EPHEMERAL_MAX_BODY_BYTES)",
             message_bound());
  else
    snprintf(msg, sizeof(msg),
             "the request body is over %zu bytes "
             "(QUEEN_EPHEMERAL_MAX_BODY_BYTES)",
             limits.max_body_bytes);
  respond_error(c, status, msg);
}

static void protocol_error(ephd_conn_t *c, llhttp_errno_t err) {
  const char *reason = llhttp_get_error_reason(&c->parser);
  c->keep_alive = 0;
  c->http10 = 0;
  if (c->refuse == 431 || c->refuse == 413) {
    refuse_over(c, c->refuse);
  } else if (c->refuse == 400 && c->repeated < 0) {
    respond_error(c, 400, "whitespace between a header's name and its colon");
  } else if (c->refuse == 400) {
    char msg[80];
    snprintf(msg, sizeof(msg), "the %s header appears more than once",
             ephd_head_names[c->repeated]);
    respond_error(c, 400, msg);
  } else {
    char msg[160];
    snprintf(msg, sizeof(msg), "malformed HTTP request: %s",
             reason ? reason : llhttp_errno_name(err));
    respond_error(c, 400, msg);
  }
}

/* After parsing, the bytes from msg_start on (a request cut by the end of a
 * read, or unparsed behind a held one) move to the connection's own
 * buffer, sized to them; everything before is answered and forgotten. */
static void keep_leftover(ephd_conn_t *c) {
  size_t from = c->msg_start, keep = c->end - from;
  if (c->base == shared_in) {
    c->in.len = 0;
    if (keep) ephd_buf_append(&c->in, shared_in + from, keep);
  } else {
    ephd_buf_consume(&c->in, from);
  }
  span_t *spans[] = {&c->url, &c->field, &c->value, &c->body};
  for (size_t i = 0; i < sizeof(spans) / sizeof(spans[0]); i++)
    if (spans[i]->off >= from) spans[i]->off -= from;
  for (int i = 0; i < EPHD_N_HEADERS; i++)
    if (c->headers[i].off >= from) c->headers[i].off -= from;
  c->parsed -= from;
  c->msg_start = 0;
  c->base = c->in.base;
  c->end = c->in.len;
  if (c->in.len == 0) ephd_buf_shrink(&c->in, 0);
}

static void update_reading(ephd_conn_t *c);

/* A chunked message's framing (sizes, extensions, trailers) never reaches
 * on_body, which counts only the data, yet its raw bytes are held until
 * the message completes: 200 bytes of body in 1 MiB extensions held a
 * gigabyte. Its raw size is bounded instead, at twice the body limit past
 * the headers' (64-byte chunks cost 1.1x their data, 1-byte chunks 6x). */
static size_t message_bound(void) {
  return limits.max_header_bytes + 2 * limits.max_body_bytes;
}

static int chunked_past_bound(const ephd_conn_t *c) {
  return c->in_body && c->body_chunked &&
         c->parsed - c->msg_start > message_bound();
}

/* What the parser is given at once: never more than one byte past the
 * current message's bound, so a message past it is refused however it
 * arrived (one that completed within a read was served before). */
static size_t parse_len(const ephd_conn_t *c) {
  size_t avail = c->end - c->parsed;
  size_t bound_end = c->msg_start + message_bound() + 1;
  if (c->parsed >= bound_end || bound_end - c->parsed >= avail) return avail;
  return bound_end - c->parsed;
}

static void process(ephd_conn_t *c) {
  while (!c->held && !c->closing && c->parsed < c->end) {
    /* Pipelined requests wait while this connection's answers are unwritten
     * past the bound (Redis's client-output-buffer-limit, without the
     * close): a client that does not read holds the bound, no more. */
    if (unwritten(c) > limits.max_unwritten_bytes) {
      c->output_paused = 1;
      break;
    }
    /* Where a message begins, llhttp has seen none of it. After a CONNECT
     * or an upgrade llhttp reads nothing more as HTTP (the next execute
     * is HPE_PAUSED_UPGRADE, a 400): neither may the plain reader, or
     * bytes a proxy tunnels would be served as requests. */
    if (c->parsed == c->msg_start) {
      /* A message's first byte, a blank line before its request line
       * included, starts its header clock: blank lines do not restart it. */
      c->began_ms = uv_now(loop);
      if (!c->parser.upgrade) {
        size_t n = read_plain(c);
        if (n) {
          c->parsed = c->msg_start = c->msg_start + n;
          continue;
        }
      }
    }
    size_t len = parse_len(c);
    if (!c->in_body) {
      /* llhttp counts none of the bytes it skips, so it is given no more
       * of a head than its room: held to a head's raw bytes, a connection
       * holds a head's bound and one read, whatever it sends. */
      len = ephd_head_room(c->parsed - c->msg_start, len,
                           limits.max_header_bytes);
      if (len == 0) {
        c->refuse = 431;
        protocol_error(c, HPE_USER);
        break;
      }
    }
    llhttp_errno_t err = llhttp_execute(&c->parser, c->base + c->parsed, len);
    if (err == HPE_OK) {
      c->parsed += len;
      if (chunked_past_bound(c)) {
        c->refuse = 413;
        protocol_error(c, HPE_USER);
        break;
      }
      continue;
    }
    if (err == HPE_PAUSED) {
      /* A request is complete and answered or held: nothing refers to its
       * bytes any more, so the next message starts here. */
      size_t pos = (size_t)(llhttp_get_error_pos(&c->parser) - c->base);
      llhttp_resume(&c->parser);
      c->parsed = c->msg_start = pos;
      continue;
    }
    protocol_error(c, err);
    break;
  }
  keep_leftover(c);
  /* Everything a client that finished sending asked is answered. */
  if (c->sent_all && !stalled(c)) c->closing = 1;
  update_reading(c);
  /* Between requests (nothing partial, nothing held) the idle clock runs,
   * as it does while the client is not taking its answers; a partial
   * request runs against the header or body deadline counted from when it
   * began or had its headers. */
  if (c->held || c->closing) return;
  if (c->in.len == 0 || c->output_paused)
    arm(c, DEADLINE_IDLE, uv_now(loop) + limits.idle_timeout_ms);
  else if (c->in_body)
    arm(c, DEADLINE_REQUEST, c->headers_ms + limits.body_timeout_ms);
  else
    arm(c, DEADLINE_REQUEST, c->began_ms + limits.header_timeout_ms);
}

static void on_deadline(uv_timer_t *t) {
  ephd_conn_t *c = t->data;
  uint64_t now = uv_now(loop);
  c->timer_armed = 0;
  if (c->deadline_kind == DEADLINE_NONE) return;
  if (now < c->deadline) {
    arm(c, c->deadline_kind, c->deadline);
    return;
  }
  if (c->deadline_kind == DEADLINE_DEFERRED) {
    c->deadline_kind = DEADLINE_NONE;
    c->deferred.ops->deadline(c->deferred.data);
    return;
  }
  if (c->deadline_kind == DEADLINE_IDLE) {
    conn_close(c);
    return;
  }
  c->keep_alive = 0;
  c->http10 = 0;
  respond_error(c, 408, "the request was not received in time");
}

/* --- I/O ------------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h) {
  ephd_conn_t *c = h->data;
  if (--c->open_handles) return;
  ephd_buf_free(&c->in);
  ephd_buf_free(&c->out);
  ephd_buf_free(&c->wbuf);
  ephd_buf_free(&c->chunked);
  free(c);
  activity++;
}

static void conn_close(ephd_conn_t *c) {
  if (c->closed) return;
  /* Uncounted now, though freed once its handles are closed: what it
   * holds no longer grows. */
  client_bytes -= c->held_bytes;
  c->held_bytes = 0;
  c->closed = 1;
  if (c->held) {
    /* Whoever holds the request must not answer a freed connection. */
    c->held = 0;
    c->deferred.ops->cancel(c->deferred.data);
  }
  finish(c);
  ephd_list_remove(&conns, &c->link);
  line_remove(&turn_line, LINE_TURN, c);
  if (ephd_list_has(&resumes, &c->resume_link))
    ephd_list_remove(&resumes, &c->resume_link);
  line_remove(&flush_line, LINE_FLUSH, c);
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

/* Every read lands in one shared buffer unless the connection holds a
 * partial request, which the new bytes must follow: an idle or held
 * connection owns no read buffer at all. */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  ephd_conn_t *c = h->data;
  (void)suggested;
  if (c->in.len == 0) {
    buf->base = shared_in;
    buf->len = sizeof(shared_in);
  } else {
    buf->base = ephd_buf_reserve(&c->in, 16384);
    buf->len = c->in.cap - c->in.len;
    /* update_reading stops reading before a stalled connection is full. */
    if (stalled(c) && buf->len > STALLED_INPUT_BYTES - c->in.len)
      buf->len = STALLED_INPUT_BYTES - c->in.len;
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Reading stops while a write is in flight (the client is not taking its
 * answers: that is the backpressure on requests that are still arriving),
 * and while a stalled connection holds its bound of unparsed input. */
static void update_reading(ephd_conn_t *c) {
  int want = !c->closed && !c->closing && !c->writing && !c->sent_all &&
             !(stalled(c) && c->in.len >= STALLED_INPUT_BYTES);
  if (want && !c->reading) {
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
      c->reading = 1;
  } else if (!want && c->reading) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
  }
}

static void on_write(uv_write_t *w, int status) {
  ephd_conn_t *c = w->data;
  c->writing = 0;
  c->wbuf.len = 0;
  ephd_buf_shrink(&c->wbuf, IDLE_KEEP_BYTES);
  if (c->closed) return;
  if (status < 0) {
    conn_close(c);
    return;
  }
  flush(c);
  update_reading(c);
}

static void flush(ephd_conn_t *c) {
  if (c->closed) return;
  if (c->writing) {
    recount(c); /* answers made meanwhile, behind the one in flight */
    return;
  }
  if (c->out.len) {
    uv_buf_t b = uv_buf_init(c->out.base, (unsigned)c->out.len);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n == UV_EAGAIN) n = 0;
    if (n < 0) {
      conn_close(c);
      return;
    }
    if ((size_t)n < c->out.len) {
      /* The kernel is full: hand the rest to libuv and stop reading until it
       * drains, which is the whole of our backpressure. The rest is written
       * from where the kernel stopped: moving it down first copied a big
       * answer (a 27 MB list) once more, inside the loop. */
      ephd_buf_t t = c->wbuf;
      c->wbuf = c->out;
      c->out = t;
      c->out.len = 0;
      b = uv_buf_init(c->wbuf.base + n, (unsigned)(c->wbuf.len - (size_t)n));
      c->wreq.data = c;
      if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) {
        conn_close(c);
        return;
      }
      c->writing = 1;
      update_reading(c);
      recount(c); /* the answer in flight is held until the client reads */
      return;
    }
    c->out.len = 0;
    ephd_buf_shrink(&c->out, IDLE_KEEP_BYTES);
  }
  if (c->closing) {
    conn_close(c);
    return;
  }
  if (c->output_paused && unwritten(c) <= limits.max_unwritten_bytes) {
    c->output_paused = 0;
    resume_later(c);
  }
  if (c->turn_on_drain && unwritten(c) <= limits.max_unwritten_bytes) {
    c->turn_on_drain = 0;
    c->deadline_kind = DEADLINE_NONE;
    ephd_deferred_turn(&c->deferred);
  }
  recount(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  ephd_conn_t *c = s->data;
  if (nread < 0) {
    /* A client that sent its requests and shut its side before reading
     * still gets the answers it was held back from: its requests are
     * parsed as they drain. */
    if (nread == UV_EOF && c->output_paused && !c->held) {
      c->sent_all = 1;
      update_reading(c);
      return;
    }
    /* EOF or error: a held request or a half-sent one is simply dropped. */
    if (c->out.len || c->writing) {
      c->closing = 1;
      uv_read_stop(s);
      c->reading = 0;
      flush(c);
    } else {
      conn_close(c);
    }
    return;
  }
  if (buf->base == shared_in) {
    c->base = shared_in;
    c->end = (size_t)nread;
    c->parsed = c->msg_start = 0;
  } else {
    c->in.len += (size_t)nread;
    c->base = c->in.base;
    c->end = c->in.len;
  }
  process(c);
  flush_later(c);
}

static void on_resume(uv_idle_t *h) {
  (void)h;
  while (resumes.head) {
    ephd_conn_t *c = EPHD_ENTRY(resumes.head, ephd_conn_t, resume_link);
    ephd_list_remove(&resumes, &c->resume_link);
    c->base = c->in.base;
    c->end = c->in.len;
    process(c);
    flush_later(c);
  }
  uv_idle_stop(&resume_idle);
}

static void on_connection(uv_stream_t *server, int status) {
  if (status < 0) return;
  ephd_conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return;
  uv_tcp_init(loop, &c->tcp);
  c->tcp.data = c;
  c->open_handles = 2;
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  c->req.conn = c;
  llhttp_init(&c->parser, HTTP_REQUEST, &settings);
  c->parser.data = c;
  ephd_list_prepend(&conns, &c->link);
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
    conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  arm(c, DEADLINE_IDLE, uv_now(loop) + limits.idle_timeout_ms);
  update_reading(c);
}

int ephd_http_start(uv_loop_t *l, const char *host, int port,
                    const ephd_http_limits_t *lim,
                    const ephd_http_handlers_t *h, char *err, size_t errlen) {
  loop = l;
  limits = *lim;
  handlers = *h;
  llhttp_settings_init(&settings);
  settings.on_message_begin = on_message_begin;
  settings.on_url = on_url;
  settings.on_header_field = on_header_field;
  settings.on_header_value = on_header_value;
  settings.on_header_value_complete = on_header_value_complete;
  settings.on_headers_complete = on_headers_complete;
  settings.on_body = on_body;
  settings.on_message_complete = on_message_complete;
  uv_idle_init(loop, &resume_idle);
  uv_idle_init(loop, &turn_idle);
  uv_check_init(loop, &flush_check);
  uv_check_start(&flush_check, on_flush_check);
  uv_unref((uv_handle_t *)&flush_check);
  uv_idle_init(loop, &flush_idle);
  struct sockaddr_storage addr;
  int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
  if (rc < 0) rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
  if (rc < 0) {
    snprintf(err, errlen, "--listen: %s is not an IP address", host);
    return rc;
  }
  uv_tcp_init(loop, &listener);
  rc = uv_tcp_bind(&listener, (const struct sockaddr *)&addr, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&listener, 1024, on_connection);
  if (rc < 0) {
    snprintf(err, errlen, "--listen %s:%d: %s", host, port, uv_strerror(rc));
    uv_close((uv_handle_t *)&listener, NULL);
    uv_close((uv_handle_t *)&resume_idle, NULL);
    uv_close((uv_handle_t *)&turn_idle, NULL);
    uv_close((uv_handle_t *)&flush_check, NULL);
    uv_close((uv_handle_t *)&flush_idle, NULL);
    return rc;
  }
  listening = 1;
  return 0;
}

void ephd_http_stop(void) {
  if (listening) {
    uv_close((uv_handle_t *)&listener, NULL);
    uv_close((uv_handle_t *)&resume_idle, NULL);
    uv_close((uv_handle_t *)&turn_idle, NULL);
    uv_close((uv_handle_t *)&flush_check, NULL);
    uv_close((uv_handle_t *)&flush_idle, NULL);
    listening = 0;
  }
  ephd_conn_t *c = EPHD_ENTRY(conns.head, ephd_conn_t, link);
  while (c) {
    ephd_conn_t *next = EPHD_ENTRY(c->link.next, ephd_conn_t, link);
    c->closing = 1;
    if (c->held && c->deferred.ops->stop) {
      /* Answered now (a parked poll: an empty batch), and closed once
       * that is written. */
      c->keep_alive = 0;
      c->deferred.ops->stop(c->deferred.data);
    } else if (c->held) {
      /* A request held for a database write is cut off: the store fails
       * its queries as it stops. */
      conn_close(c);
    } else {
      flush(c);
    }
    c = next;
  }
  /* The answers given just now, before the check handle is gone. */
  on_flush_check(NULL);
}

size_t ephd_http_abort(void) {
  size_t held = 0;
  ephd_conn_t *c = EPHD_ENTRY(conns.head, ephd_conn_t, link);
  while (c) {
    ephd_conn_t *next = EPHD_ENTRY(c->link.next, ephd_conn_t, link);
    if (c->held)
      held++;
    else
      conn_close(c);
    c = next;
  }
  return held;
}
