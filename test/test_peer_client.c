/* The relay's client against a tiny scripted HTTP server on the same loop:
 * what the server does is chosen by the request's target. Nothing waits on
 * the clock except the deadline tests' own short deadlines. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "peer_client.h"
#include "test.h"

/* --- the server ------------------------------------------------------
 * /hold...    held until srv_release() answers it (oldest first)
 * /silent...  never answered
 * As a real server, a connection answers in order: what follows a held or
 * silent request on it waits.
 * /raw...     answered with srv.raw, then srv.then (keep, close, reset)
 * /close...   answered with Connection: close
 * POST /early answered as soon as its head is read, its body never read
 * /then-discard... answered, then everything after it read and forgotten
 * /reset-line...   srv.on_reset runs, then the connection is reset unanswered
 * anything    answered 200 with the target as body, Content-Type and a
 *             Retry-After */

enum { KEEP, CLOSE, RESET };

typedef struct sconn {
  uv_tcp_t tcp;
  char in[65536];
  size_t len;
  uint64_t held; /* the order it was held in; 0: not holding */
  int silent;
  char held_target[64];
  struct sconn *next;
} sconn_t;

typedef struct {
  uv_write_t req;
  sconn_t *conn;
  int then;
  char data[];
} swrite_t;

static struct {
  uv_tcp_t listener;
  int port;
  int accepted, open, max_open, requests;
  uint64_t holds;
  sconn_t *conns;
  const char *raw;
  size_t raw_len;
  int then;
  void (*on_reset)(void);
  char targets[64][64];
  char last[1024];
} srv;

static uv_loop_t loop;
static uv_timer_t watchdog;
static int timed_out;

static void on_sconn_closed(uv_handle_t *h) {
  sconn_t *c = h->data;
  sconn_t **pp = &srv.conns;
  while (*pp != c) pp = &(*pp)->next;
  *pp = c->next;
  srv.open--;
  free(c);
}

static void sconn_close(sconn_t *c, int reset) {
  if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
  if (reset)
    uv_tcp_close_reset(&c->tcp, on_sconn_closed);
  else
    uv_close((uv_handle_t *)&c->tcp, on_sconn_closed);
}

static void on_swrite(uv_write_t *w, int status) {
  swrite_t *sw = (swrite_t *)w;
  if (status == 0 && sw->then != KEEP) sconn_close(sw->conn, sw->then == RESET);
  free(sw);
}

static void swrite(sconn_t *c, const char *data, size_t len, int then) {
  if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
  swrite_t *sw = malloc(sizeof(*sw) + len);
  memcpy(sw->data, data, len);
  sw->conn = c;
  sw->then = then;
  uv_buf_t b = uv_buf_init(sw->data, (unsigned)len);
  uv_write(&sw->req, (uv_stream_t *)&c->tcp, &b, 1, on_swrite);
}

/* A server connection that reads and forgets until its peer goes. */
static char discard[65536];
static size_t discarded;
static void on_sdiscard_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf) {
  (void)h;
  (void)s;
  *buf = uv_buf_init(discard, sizeof(discard));
}
static void on_sdiscard(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  if (n < 0)
    sconn_close(s->data, 0);
  else
    discarded += (size_t)n;
}

static void echo(sconn_t *c, const char *target, const char *extra) {
  char out[512];
  int n = snprintf(out, sizeof(out),
                   "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                   "Retry-After: 7\r\n%sContent-Length: %zu\r\n\r\n%s",
                   extra, strlen(target), target);
  swrite(c, out, (size_t)n, KEEP);
}

static void handle(sconn_t *c, const char *target) {
  snprintf(srv.targets[srv.requests++ % 64], 64, "%s", target);
  if (strncmp(target, "/hold", 5) == 0) {
    c->held = ++srv.holds;
    snprintf(c->held_target, sizeof(c->held_target), "%s", target);
  } else if (strncmp(target, "/silent", 7) == 0) {
    c->silent = 1;
  } else if (strncmp(target, "/raw", 4) == 0) {
    swrite(c, srv.raw, srv.raw_len, srv.then);
  } else if (strncmp(target, "/then-discard", 13) == 0) {
    echo(c, target, "");
    c->silent = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_read_start((uv_stream_t *)&c->tcp, on_sdiscard_alloc, on_sdiscard);
  } else if (strncmp(target, "/reset-line", 11) == 0) {
    if (srv.on_reset) srv.on_reset();
    c->silent = 1;
    sconn_close(c, 1);
  } else if (strncmp(target, "/close", 6) == 0) {
    echo(c, target, "Connection: close\r\n");
  } else {
    echo(c, target, "");
  }
}

/* Takes whole requests (headers and a Content-Length body) off c->in. */
static void sconn_parse(sconn_t *c) {
  while (!c->held && !c->silent) {
    char *end = memmem(c->in, c->len, "\r\n\r\n", 4);
    if (end == NULL) return;
    size_t head = (size_t)(end - c->in) + 4, body = 0;
    char *cl = memmem(c->in, head, "Content-Length: ", 16);
    if (cl) body = strtoul(cl + 16, NULL, 10);
    if (c->len < head + body && memcmp(c->in, "POST /early", 11) == 0) {
      /* Answered on its head, its body left unread. */
      c->silent = 1;
      uv_read_stop((uv_stream_t *)&c->tcp);
      srv.requests++;
      echo(c, "/early", "");
      return;
    }
    if (c->len < head + body) return;
    size_t n =
        head + body < sizeof(srv.last) - 1 ? head + body : sizeof(srv.last) - 1;
    memcpy(srv.last, c->in, n);
    srv.last[n] = 0;
    char target[64] = "";
    sscanf(c->in, "%*s %63s", target);
    memmove(c->in, c->in + head + body, c->len - head - body);
    c->len -= head + body;
    handle(c, target);
  }
}

static void on_salloc(uv_handle_t *h, size_t s, uv_buf_t *buf) {
  sconn_t *c = h->data;
  (void)s;
  *buf = uv_buf_init(c->in + c->len, (unsigned)(sizeof(c->in) - c->len));
}

static void on_sread(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  sconn_t *c = s->data;
  (void)buf;
  if (n < 0) {
    sconn_close(c, 0);
    return;
  }
  c->len += (size_t)n;
  sconn_parse(c);
}

static void on_sconnection(uv_stream_t *l, int status) {
  if (status < 0) return;
  sconn_t *c = calloc(1, sizeof(*c));
  uv_tcp_init(&loop, &c->tcp);
  c->tcp.data = c;
  c->next = srv.conns;
  srv.conns = c;
  srv.accepted++;
  if (++srv.open > srv.max_open) srv.max_open = srv.open;
  if (uv_accept(l, (uv_stream_t *)&c->tcp) == 0)
    uv_read_start((uv_stream_t *)&c->tcp, on_salloc, on_sread);
  else
    sconn_close(c, 0);
}

static void release(sconn_t *c) {
  c->held = 0;
  echo(c, c->held_target, "");
  sconn_parse(c);
}

/* Answers the request held longest. */
static int srv_release(void) {
  sconn_t *oldest = NULL;
  for (sconn_t *c = srv.conns; c; c = c->next)
    if (c->held && (oldest == NULL || c->held < oldest->held)) oldest = c;
  if (oldest == NULL) return 0;
  release(oldest);
  return 1;
}

static sconn_t *holding(const char *target) {
  for (sconn_t *c = srv.conns; c; c = c->next)
    if (c->held && strcmp(c->held_target, target) == 0) return c;
  return NULL;
}

static int srv_held(void) {
  int n = 0;
  for (sconn_t *c = srv.conns; c; c = c->next) n += c->held != 0;
  return n;
}

/* Closes every server-side connection now (their FIN leaves at once). */
static void srv_drop_all(void) {
  for (sconn_t *c = srv.conns; c; c = c->next) sconn_close(c, 0);
}

static void srv_start(const char *ip) {
  memset(&srv, 0, sizeof(srv));
  uv_tcp_init(&loop, &srv.listener);
  struct sockaddr_storage a;
  if (strchr(ip, ':'))
    uv_ip6_addr(ip, 0, (struct sockaddr_in6 *)&a);
  else
    uv_ip4_addr(ip, 0, (struct sockaddr_in *)&a);
  srv.port = -1;
  if (uv_tcp_bind(&srv.listener, (struct sockaddr *)&a, 0) != 0 ||
      uv_listen((uv_stream_t *)&srv.listener, 64, on_sconnection) != 0)
    return;
  int len = sizeof(a);
  uv_tcp_getsockname(&srv.listener, (struct sockaddr *)&a, &len);
  srv.port =
      ntohs(a.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port
                                    : ((struct sockaddr_in *)&a)->sin_port);
}

/* --- the client side -------------------------------------------------- */

typedef struct {
  int calls, kind, status, order;
  char body[4096];
  size_t body_len;
  char ctype[64], retry[16];
} result_t;

static result_t res[16];
static ephd_peer_call_t *handles[16];
static int ncalls;

static void on_done(void *data, int kind, const ephd_peer_response_t *r) {
  result_t *x = data;
  x->calls++;
  x->kind = kind;
  x->order = ncalls++;
  if (r == NULL) return;
  x->status = r->status;
  x->body_len = r->body.len;
  memcpy(x->body, r->body.ptr,
         r->body.len < sizeof(x->body) ? r->body.len : sizeof(x->body));
  snprintf(x->ctype, sizeof(x->ctype), "%.*s", (int)r->content_type.len,
           r->content_type.ptr);
  snprintf(x->retry, sizeof(x->retry), "%.*s", (int)r->retry_after.len,
           r->retry_after.ptr);
}

static ephd_slice_t S(const char *s) {
  ephd_slice_t out = {s, strlen(s)};
  return out;
}

/* Sends GET target as request i; returns send's result. */
static int go_as(ephd_peer_t *p, int i, const char *target, uint64_t timeout_ms,
                 int parks) {
  ephd_peer_request_t req = {S("GET"),   S(target), S(""), S(""),
                             timeout_ms, parks,     0,     NULL,
                             0,          0,         NULL};
  return ephd_peer_send(p, &req, on_done, &res[i], &handles[i]);
}

static int go(ephd_peer_t *p, int i, const char *target) {
  return go_as(p, i, target, 5000, 0);
}

static void on_watchdog(uv_timer_t *t) {
  (void)t;
  timed_out = 1;
}

/* Runs the loop until cond holds; a stuck test fails after 5 s. */
#define RUN_UNTIL(cond)                                                     \
  do {                                                                      \
    while (!(cond) && !timed_out) uv_run(&loop, UV_RUN_ONCE);               \
    if (timed_out) {                                                        \
      fprintf(stderr, "%s:%d: timed out waiting: %s\n", __FILE__, __LINE__, \
              #cond);                                                       \
      return 1;                                                             \
    }                                                                       \
  } while (0)

static ephd_peer_limits_t lim;

static ephd_peer_t *start_on(const char *ip) {
  uv_loop_init(&loop);
  memset(res, 0, sizeof(res));
  memset(handles, 0, sizeof(handles));
  ncalls = 0;
  timed_out = 0;
  uv_timer_init(&loop, &watchdog);
  uv_timer_start(&watchdog, on_watchdog, 5000, 0);
  uv_unref((uv_handle_t *)&watchdog);
  ephd_peer_init(&loop, &lim);
  srv_start(ip);
  if (srv.port < 0) return NULL;
  char addr[64];
  snprintf(addr, sizeof(addr), strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip,
           srv.port);
  return ephd_peer(addr);
}

static ephd_peer_t *start(void) { return start_on("127.0.0.1"); }

static void defaults(void) {
  ephd_peer_limits_t d = EPHD_PEER_LIMITS_DEFAULT;
  lim = d;
}

/* Stops everything; every handle must close, or uv_loop_close says so. */
static int stop(void) {
  ephd_peer_close_all();
  uv_close((uv_handle_t *)&srv.listener, NULL);
  for (sconn_t *c = srv.conns; c; c = c->next) sconn_close(c, 0);
  uv_close((uv_handle_t *)&watchdog, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  return uv_loop_close(&loop);
}

static const ephd_peer_stats_t *st(void) { return ephd_peer_stats(); }

/* A listener whose one-connection backlog is already taken: a further
 * SYN is dropped, so a connect to it hangs until its deadline. */
static int blackhole(int fds[2]) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  fds[0] = socket(AF_INET, SOCK_STREAM, 0);
  if (bind(fds[0], (struct sockaddr *)&a, sizeof(a)) != 0 ||
      listen(fds[0], 0) != 0 ||
      getsockname(fds[0], (struct sockaddr *)&a, &len) != 0)
    return -1;
  fds[1] = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fds[1], (struct sockaddr *)&a, sizeof(a)) != 0) return -1;
  return ntohs(a.sin_port);
}

/* --- tests --------------------------------------------------------------- */

TEST_IMPL(peer_request_response) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ephd_peer_request_t req = {S("POST"),
                             S("/api/v1/ephemeral/push?x=1"),
                             S("x-queen-tenant: t1\r\nX-Mark: m\r\n"),
                             S("{\"a\":1}"),
                             5000,
                             0,
                             0,
                             NULL,
                             0,
                             0,
                             NULL};
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[0], &handles[0]), 0);
  ASSERT_EQ(res[0].calls, 0); /* never from inside send */
  RUN_UNTIL(res[0].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
  ASSERT_EQ(res[0].status, 200);
  ASSERT_MEM_EQ(res[0].body, res[0].body_len, "/api/v1/ephemeral/push?x=1");
  ASSERT_MEM_EQ(res[0].ctype, strlen(res[0].ctype), "text/plain");
  ASSERT_MEM_EQ(res[0].retry, strlen(res[0].retry), "7");
  char want[256];
  snprintf(want, sizeof(want),
           "POST /api/v1/ephemeral/push?x=1 HTTP/1.1\r\n"
           "Host: 127.0.0.1:%d\r\nContent-Length: 7\r\n"
           "x-queen-tenant: t1\r\nX-Mark: m\r\n\r\n{\"a\":1}",
           srv.port);
  ASSERT_MEM_EQ(srv.last, strlen(srv.last), want);
  ASSERT_EQ(st()->requests, 1);
  ASSERT_EQ(st()->responses, 1);
  ASSERT_EQ(st()->latency_count, 1);
  ASSERT(st()->latency_ns_sum > 0);
  uint64_t bucketed = 0; /* the one answer, in the bucket its time says */
  for (int b = 0; b <= EPHD_PEER_LATENCY_BUCKETS; b++) {
    bucketed += st()->latency_buckets[b];
    if (st()->latency_buckets[b] == 1) {
      ASSERT(b == EPHD_PEER_LATENCY_BUCKETS ||
             st()->latency_ns_sum <= ephd_peer_latency_bounds_ns[b]);
      ASSERT(b == 0 ||
             st()->latency_ns_sum > ephd_peer_latency_bounds_ns[b - 1]);
    }
  }
  ASSERT_EQ(bucketed, 1);
  ASSERT_EQ(st()->in_flight, 0);
  ASSERT_EQ(st()->connections_open, 1); /* pooled */
  ASSERT_EQ(stop(), 0);
  ASSERT_EQ(res[0].calls, 1);
  ASSERT_EQ(st()->connections_open, 0);
  return 0;
}

/* Sends the next request from inside the callback: the connection is back
 * in the pool before the callback runs, so the chain uses one. */
static int chain_left;
static ephd_peer_t *chain_peer;

static void on_chain(void *data, int kind, const ephd_peer_response_t *r) {
  on_done(data, kind, r);
  if (kind == EPHD_PEER_OK && --chain_left > 0) {
    ephd_peer_request_t req = {S("GET"), S("/chained"), S(""), S(""), 5000, 0,
                               0,        NULL,          0,     0,     NULL};
    ephd_peer_send(chain_peer, &req, on_chain, data, &handles[1]);
  }
}

TEST_IMPL(peer_keep_alive_reuse) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  for (int i = 0; i < 10; i++) {
    char target[32];
    snprintf(target, sizeof(target), "/n%d", i);
    ASSERT_EQ(go(p, 0, target), 0);
    RUN_UNTIL(res[0].calls == i + 1);
    ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
    ASSERT_MEM_EQ(res[0].body, res[0].body_len, target);
  }
  chain_peer = p;
  chain_left = 10;
  ephd_peer_request_t req = {S("GET"), S("/chained"), S(""), S(""), 5000, 0,
                             0,        NULL,          0,     0,     NULL};
  ASSERT_EQ(ephd_peer_send(p, &req, on_chain, &res[1], &handles[1]), 0);
  RUN_UNTIL(res[1].calls == 10);
  ASSERT_EQ(srv.accepted, 1);
  ASSERT_EQ(srv.requests, 20);
  ASSERT_EQ(st()->connections_opened, 1);
  ASSERT_EQ(st()->retries, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

TEST_IMPL(peer_chunked_response) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  static const char chunked[] =
      "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n"
      "Content-Type: application/json\r\n\r\n"
      "5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\n"
      "Content-Type: trailer/ignored\r\n\r\n";
  srv.raw = chunked;
  srv.raw_len = sizeof(chunked) - 1;
  ASSERT_EQ(go(p, 0, "/raw"), 0);
  RUN_UNTIL(res[0].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
  ASSERT_EQ(res[0].status, 201);
  ASSERT_MEM_EQ(res[0].body, res[0].body_len, "hello world");
  ASSERT_MEM_EQ(res[0].ctype, strlen(res[0].ctype), "application/json");
  ASSERT_EQ(strlen(res[0].retry), 0);
  /* The connection is whole after a chunked body: the next one reuses it. */
  ASSERT_EQ(go(p, 1, "/next"), 0);
  RUN_UNTIL(res[1].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_OK);
  ASSERT_EQ(srv.accepted, 1);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* A 1xx before the answer is skipped; a body to the end of the connection
 * is whole at EOF; bytes after an answer close the connection. */
TEST_IMPL(peer_response_framings) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  static const char info[] =
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\n"
      "Content-Length: 2\r\n\r\nno";
  srv.raw = info;
  srv.raw_len = sizeof(info) - 1;
  ASSERT_EQ(go(p, 0, "/raw"), 0);
  RUN_UNTIL(res[0].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
  ASSERT_EQ(res[0].status, 503);
  ASSERT_MEM_EQ(res[0].retry, strlen(res[0].retry), "3");
  ASSERT_MEM_EQ(res[0].body, res[0].body_len, "no");

  static const char to_eof[] = "HTTP/1.1 200 OK\r\n\r\nuntil the end";
  srv.raw = to_eof;
  srv.raw_len = sizeof(to_eof) - 1;
  srv.then = CLOSE;
  ASSERT_EQ(go(p, 1, "/raw"), 0);
  RUN_UNTIL(res[1].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_OK);
  ASSERT_MEM_EQ(res[1].body, res[1].body_len, "until the end");

  static const char extra[] =
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\n";
  srv.raw = extra;
  srv.raw_len = sizeof(extra) - 1;
  srv.then = KEEP;
  ASSERT_EQ(go(p, 2, "/raw"), 0);
  RUN_UNTIL(res[2].calls);
  ASSERT_EQ(res[2].kind, EPHD_PEER_OK);
  ASSERT_MEM_EQ(res[2].body, res[2].body_len, "x");
  ASSERT_EQ(go(p, 3, "/close"), 0);
  RUN_UNTIL(res[3].calls);
  ASSERT_EQ(res[3].kind, EPHD_PEER_OK);
  ASSERT_EQ(srv.accepted, 3); /* /raw+/raw(eof), then extra, then close */
  ASSERT_EQ(go(p, 4, "/after-close"), 0);
  RUN_UNTIL(res[4].calls);
  ASSERT_EQ(srv.accepted, 4); /* Connection: close is honoured */
  ASSERT_EQ(st()->retries, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

TEST_IMPL(peer_malformed_response) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  static const char *bad[] = {
      "SMTP ready\r\n\r\n",
      "HTTP/1.1 2000 OK\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
  };
  for (int i = 0; i < 5; i++) {
    srv.raw = bad[i];
    srv.raw_len = strlen(bad[i]);
    ASSERT_EQ(go(p, i, "/raw"), 0);
    RUN_UNTIL(res[i].calls);
    ASSERT_EQ(res[i].kind, EPHD_PEER_E_MALFORMED);
  }
  ASSERT_EQ(st()->failures[-EPHD_PEER_E_MALFORMED], 5);
  ASSERT_EQ(st()->retries, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

TEST_IMPL(peer_pool_cap_fifo) {
  defaults();
  lim.max_conns = 2;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  for (int i = 0; i < 5; i++) {
    char target[16];
    snprintf(target, sizeof(target), "/hold%d", i);
    ASSERT_EQ(go(p, i, target), 0);
  }
  RUN_UNTIL(srv_held() == 2);
  ASSERT(holding("/hold0") && holding("/hold1"));
  ASSERT_EQ(st()->in_flight, 2);
  ASSERT_EQ(st()->queued, 3);
  /* Each answer frees a slot, which the head of the queue takes. */
  for (int i = 0; i < 5; i++) {
    char target[16], next[16];
    snprintf(target, sizeof(target), "/hold%d", i);
    snprintf(next, sizeof(next), "/hold%d", i + 2);
    release(holding(target));
    RUN_UNTIL(res[i].calls && srv_held() == (i + 2 < 5 ? 2 : 4 - i));
    ASSERT_EQ(res[i].kind, EPHD_PEER_OK);
    ASSERT_MEM_EQ(res[i].body, res[i].body_len, target);
    if (i + 2 < 5) ASSERT(holding(next));
  }
  for (int i = 2; i < 5; i++) {
    char target[16];
    snprintf(target, sizeof(target), "/hold%d", i);
    ASSERT_MEM_EQ(srv.targets[i], strlen(srv.targets[i]), target);
  }
  ASSERT_EQ(srv.accepted, 2);
  ASSERT_EQ(srv.max_open, 2);
  ASSERT_EQ(stop(), 0);
  return 0;
}

TEST_IMPL(peer_queue_bound) {
  defaults();
  lim.max_conns = 1;
  lim.max_queued = 2;
  lim.max_parked = 1;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go(p, 0, "/hold0"), 0); /* takes the one slot */
  ASSERT_EQ(go(p, 1, "/hold1"), 0);
  ASSERT_EQ(go(p, 2, "/hold2"), 0);
  ASSERT_EQ(go(p, 3, "/hold3"), EPHD_PEER_E_QUEUE_FULL);
  /* The other lane has its own slots and queue. */
  ASSERT_EQ(go_as(p, 4, "/hold-parked", 5000, 1), 0);
  ASSERT_EQ(st()->failures[-EPHD_PEER_E_QUEUE_FULL], 1);
  ASSERT_EQ(st()->requests, 4);
  RUN_UNTIL(srv_held() == 2);
  for (int i = 0; i < 4; i++) {
    RUN_UNTIL(srv_held() > 0);
    srv_release();
    RUN_UNTIL(ncalls == i + 1);
  }
  ASSERT_EQ(res[3].calls, 0);
  for (int i = 0; i < 5; i++)
    if (i != 3) ASSERT_EQ(res[i].kind, EPHD_PEER_OK);
  ASSERT_EQ(stop(), 0);
  ASSERT_EQ(res[3].calls, 0);
  return 0;
}

/* A relayed long poll holds a slot of the parking lane only: pushes pass
 * it even when that lane is full, and a waiting pop queues in its own. */
TEST_IMPL(peer_parked_lane_apart) {
  defaults();
  lim.max_conns = 1;
  lim.max_parked = 2;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  for (int i = 0; i < 3; i++) {
    char target[16];
    snprintf(target, sizeof(target), "/hold-pop%d", i);
    ASSERT_EQ(go_as(p, i, target, 5000, 1), 0);
  }
  RUN_UNTIL(srv_held() == 2);
  ASSERT_EQ(st()->queued, 1); /* the third pop */
  /* The short lane's one slot is free: pushes go, one after another, on a
   * connection of their own. */
  for (int i = 3; i < 7; i++) {
    ASSERT_EQ(go(p, i, "/push"), 0);
    RUN_UNTIL(res[i].calls);
    ASSERT_EQ(res[i].kind, EPHD_PEER_OK);
  }
  ASSERT_EQ(res[0].calls + res[1].calls + res[2].calls, 0);
  ASSERT_EQ(srv.accepted, 3);
  ASSERT_EQ(st()->queued, 1);
  release(holding("/hold-pop0"));
  RUN_UNTIL(res[0].calls && holding("/hold-pop2"));
  release(holding("/hold-pop1"));
  release(holding("/hold-pop2"));
  RUN_UNTIL(res[1].calls && res[2].calls);
  ASSERT_EQ(res[2].kind, EPHD_PEER_OK);
  ASSERT_EQ(srv.accepted, 3); /* the third pop reused a connection */
  ASSERT_EQ(stop(), 0);
  return 0;
}

TEST_IMPL(peer_connect_deadlines) {
  defaults();
  lim.max_conns = 1;
  int fds[2];
  int port = blackhole(fds);
  ASSERT(port > 0);
  ephd_peer_t *live = start();
  ASSERT(live != NULL);
  char addr[32];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  ephd_peer_t *p = ephd_peer(addr);
  ASSERT(p != NULL);
  ASSERT_EQ(go_as(p, 0, "/a", 60, 0), 0);
  ASSERT_EQ(go_as(p, 1, "/b", 30, 0), 0); /* behind /a, in the queue */
  ASSERT_EQ(go(live, 2, "/live"), 0);     /* another peer is not held up */
  RUN_UNTIL(res[0].calls && res[1].calls && res[2].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_E_QUEUE_TIMEOUT);
  ASSERT_EQ(res[0].kind, EPHD_PEER_E_CONNECT_TIMEOUT);
  ASSERT_EQ(res[2].kind, EPHD_PEER_OK);
  ASSERT(res[1].order < res[0].order);
  /* A port nobody listens on: refused at once. */
  int closed_port = srv.port;
  uv_close((uv_handle_t *)&srv.listener, NULL);
  srv_drop_all();
  RUN_UNTIL(srv.open == 0 && st()->connections_open == 0);
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", closed_port);
  srv.port = 0;
  ASSERT_EQ(go(ephd_peer(addr), 3, "/refused"), 0);
  RUN_UNTIL(res[3].calls);
  ASSERT_EQ(res[3].kind, EPHD_PEER_E_CONNECT);
  ASSERT_EQ(st()->failures[-EPHD_PEER_E_CONNECT], 1);
  ephd_peer_close_all();
  uv_close((uv_handle_t *)&watchdog, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  close(fds[0]);
  close(fds[1]);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  return 0;
}

TEST_IMPL(peer_answer_deadline) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go_as(p, 0, "/silent", 40, 0), 0);
  RUN_UNTIL(res[0].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_E_ANSWER_TIMEOUT);
  /* Its connection is closed: a late answer would be taken for the next. */
  RUN_UNTIL(srv.open == 0);
  ASSERT_EQ(st()->connections_open, 0);
  ASSERT_EQ(go(p, 1, "/after"), 0);
  RUN_UNTIL(res[1].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_OK);
  ASSERT_EQ(srv.accepted, 2);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* Requests queued behind a silent one, all due at once: each slot the
 * timeouts free goes to nobody whose own deadline has passed, so no
 * connection is opened to be closed in the same turn. */
TEST_IMPL(peer_expired_queued_open_nothing) {
  defaults();
  lim.max_conns = 1;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  for (int i = 0; i < 4; i++) ASSERT_EQ(go_as(p, i, "/silent", 40, 0), 0);
  RUN_UNTIL(res[3].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_E_ANSWER_TIMEOUT);
  for (int i = 1; i < 4; i++) ASSERT_EQ(res[i].kind, EPHD_PEER_E_QUEUE_TIMEOUT);
  ASSERT_EQ(st()->connections_opened, 1);
  ASSERT_EQ(stop(), 0);
  return 0;
}

TEST_IMPL(peer_retry_once_on_stale_connection) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go(p, 0, "/first"), 0);
  RUN_UNTIL(res[0].calls);
  /* The peer lets the idle connection go, and our request goes out on it
   * before we could have read its FIN: not a byte of an answer comes. */
  srv_drop_all();
  ASSERT_EQ(go(p, 1, "/second"), 0);
  RUN_UNTIL(res[1].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_OK);
  ASSERT_MEM_EQ(res[1].body, res[1].body_len, "/second");
  ASSERT_EQ(st()->retries, 1);
  ASSERT_EQ(srv.accepted, 2);
  ASSERT_EQ(srv.requests, 2); /* the first peer never read it */
  /* A pooled connection the peer closed while we were idle is dropped
   * when its FIN is read; the next request opens a new one. */
  srv_drop_all();
  RUN_UNTIL(st()->connections_open == 0);
  ASSERT_EQ(go(p, 2, "/third"), 0);
  RUN_UNTIL(res[2].calls);
  ASSERT_EQ(res[2].kind, EPHD_PEER_OK);
  ASSERT_EQ(st()->retries, 1);
  ASSERT_EQ(stop(), 0);
  return 0;
}

TEST_IMPL(peer_no_retry_after_answer_began) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go(p, 0, "/first"), 0);
  RUN_UNTIL(res[0].calls);
  /* On the reused connection: part of an answer, then the peer closes. */
  static const char partial[] =
      "HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\n{\"par";
  srv.raw = partial;
  srv.raw_len = sizeof(partial) - 1;
  srv.then = CLOSE;
  ASSERT_EQ(go(p, 1, "/raw-closed"), 0);
  RUN_UNTIL(res[1].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_E_CLOSED);
  /* On a fresh connection: part of an answer, then a reset. */
  srv.then = RESET;
  ASSERT_EQ(go(p, 2, "/raw-reset"), 0);
  RUN_UNTIL(res[2].calls);
  ASSERT_EQ(res[2].kind, EPHD_PEER_E_CLOSED);
  ASSERT_EQ(st()->retries, 0);
  ASSERT_EQ(srv.requests, 3); /* each was sent exactly once */
  ASSERT_EQ(srv.accepted, 2);
  ASSERT_EQ(st()->failures[-EPHD_PEER_E_CLOSED], 2);
  ASSERT_EQ(stop(), 0);
  return 0;
}

TEST_IMPL(peer_cancel) {
  defaults();
  lim.max_conns = 1;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go(p, 0, "/hold-a"), 0);
  ASSERT_EQ(go(p, 1, "/hold-b"), 0);
  RUN_UNTIL(srv_held() == 1);
  ephd_peer_cancel(handles[1]); /* queued: simply dropped */
  ASSERT_EQ(st()->queued, 0);
  ephd_peer_cancel(handles[0]); /* in flight: its connection goes */
  ASSERT_EQ(st()->in_flight, 0);
  ASSERT_EQ(st()->connections_open, 0);
  RUN_UNTIL(srv.open == 0);
  ASSERT_EQ(go(p, 2, "/c"), 0);
  RUN_UNTIL(res[2].calls);
  ASSERT_EQ(res[2].kind, EPHD_PEER_OK);
  ASSERT_EQ(srv.accepted, 2);
  ASSERT_EQ(srv.requests, 2); /* hold-b never reached the peer */
  ASSERT_EQ(st()->cancelled, 2);
  ASSERT_EQ(stop(), 0);
  ASSERT_EQ(res[0].calls + res[1].calls, 0);
  return 0;
}

TEST_IMPL(peer_response_too_large) {
  defaults();
  lim.max_response_bytes = 1024;
  lim.max_header_bytes = 1024;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  static char big[8192];
  const char *kinds[] = {"length", "chunked", "eof", "headers"};
  for (int i = 0; i < 4; i++) {
    int n;
    if (i == 0) {
      n = snprintf(big, sizeof(big),
                   "HTTP/1.1 200 OK\r\nContent-Length: 1025\r\n\r\n");
    } else if (i == 1) {
      n = snprintf(big, sizeof(big),
                   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "200\r\n%0512d\r\n200\r\n%0512d\r\n1\r\nx\r\n0\r\n\r\n",
                   0, 0);
    } else if (i == 2) {
      n = snprintf(big, sizeof(big), "HTTP/1.1 200 OK\r\n\r\n%02000d", 0);
    } else {
      n = snprintf(big, sizeof(big),
                   "HTTP/1.1 200 OK\r\nX-Big: %01100d\r\n"
                   "Content-Length: 0\r\n\r\n",
                   0);
    }
    srv.raw = big;
    srv.raw_len = (size_t)n;
    srv.then = i == 2 ? CLOSE : KEEP;
    ASSERT_EQ(go(p, i, "/raw"), 0);
    RUN_UNTIL(res[i].calls);
    if (res[i].kind != EPHD_PEER_E_TOO_LARGE)
      fprintf(stderr, "%s: %s\n", kinds[i], ephd_peer_kind_name(res[i].kind));
    ASSERT_EQ(res[i].kind, EPHD_PEER_E_TOO_LARGE);
  }
  /* Exactly at the limit is fine. */
  int n = snprintf(big, sizeof(big),
                   "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n%01024d", 0);
  srv.raw_len = (size_t)n;
  srv.then = KEEP;
  ASSERT_EQ(go(p, 4, "/raw"), 0);
  RUN_UNTIL(res[4].calls);
  ASSERT_EQ(res[4].kind, EPHD_PEER_OK);
  ASSERT_EQ(res[4].body_len, 1024);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* close_all answers every pending request at once, in flight, queued or
 * connecting, refuses what follows, and leaves the loop nothing to run. */
static int sent_while_stopping;

static void on_stop_send(void *data, int kind, const ephd_peer_response_t *r) {
  on_done(data, kind, r);
  sent_while_stopping = go(chain_peer, 5, "/too-late");
}

TEST_IMPL(peer_close_all_pending) {
  defaults();
  lim.max_conns = 1;
  int fds[2];
  int port = blackhole(fds);
  ASSERT(port > 0);
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  chain_peer = p;
  ephd_peer_request_t req = {S("GET"), S("/hold"), S(""), S(""), 5000, 0,
                             0,        NULL,       0,     0,     NULL};
  ASSERT_EQ(ephd_peer_send(p, &req, on_stop_send, &res[0], &handles[0]), 0);
  ASSERT_EQ(go(p, 1, "/queued"), 0);
  ASSERT_EQ(go_as(p, 2, "/hold-parked", 5000, 1), 0);
  char addr[32];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  ephd_peer_t *hole = ephd_peer(addr);
  ASSERT_EQ(go(hole, 3, "/connecting"), 0);
  RUN_UNTIL(srv_held() == 2);
  ephd_peer_close_all();
  ASSERT_EQ(sent_while_stopping, EPHD_PEER_E_STOPPING);
  ASSERT_EQ(res[5].calls, 0);
  for (int i = 0; i < 4; i++) {
    ASSERT_EQ(res[i].calls, 1);
    ASSERT_EQ(res[i].kind, EPHD_PEER_E_STOPPING);
  }
  ASSERT_EQ(go(p, 4, "/late"), EPHD_PEER_E_STOPPING);
  ASSERT(ephd_peer("127.0.0.1:1") == NULL);
  ASSERT_EQ(st()->connections_open, 0);
  ASSERT_EQ(st()->in_flight + st()->queued, 0);
  uv_close((uv_handle_t *)&srv.listener, NULL);
  srv_drop_all();
  uv_close((uv_handle_t *)&watchdog, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  close(fds[0]);
  close(fds[1]);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  return 0;
}

/* A borrowed body is written from the caller's bytes, and what a peer has
 * not answered is bounded in bytes: past max_peer_bytes a send is refused
 * at once, one request always taken. */
TEST_IMPL(peer_borrowed_body_and_peer_bytes) {
  defaults();
  lim.max_peer_bytes = 300;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  char body[200];
  memset(body, 'b', sizeof(body));
  ephd_peer_request_t req = {S("POST"), S("/echo"), S(""), {body, sizeof(body)},
                             5000,      0,          1,     NULL,
                             0,         0,          NULL};
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[0], &handles[0]), 0);
  ASSERT(st()->bytes > sizeof(body));
  RUN_UNTIL(res[0].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
  ASSERT(memmem(srv.last, strlen(srv.last), body, sizeof(body)) != NULL);
  ASSERT_EQ(st()->bytes, 0);
  req.target = S("/hold");
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[1], &handles[1]), 0);
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[2], &handles[2]),
            EPHD_PEER_E_PEER_BYTES);
  ASSERT_EQ(st()->failures[-EPHD_PEER_E_PEER_BYTES], 1);
  ephd_peer_cancel(handles[1]);
  ASSERT_EQ(st()->bytes, 0);
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[2], &handles[2]), 0);
  ASSERT_EQ(stop(), 0);
  ASSERT_EQ(res[2].kind, EPHD_PEER_E_STOPPING);
  return 0;
}

/* With a session writer set, the first request of each connection (and
 * only it) carries the writer's line among its headers, written for the
 * peer's authority; and the drain waits until nothing is out. */
static int sessions_written;
static void session_line(char *out, const char *authority) {
  char line[64];
  int n = snprintf(line, sizeof(line), "X-Session: %d %s", ++sessions_written,
                   authority);
  memset(out, '.', 48);
  memcpy(out, line, (size_t)n < 46 ? (size_t)n : 46);
  out[46] = '\r';
  out[47] = '\n';
}

/* ephd_peer_drain's waiter, and what was still out when it was told. */
static int drained;
static uint64_t out_when_drained;
static void on_drained(void) {
  drained++;
  out_when_drained = st()->in_flight + st()->queued;
}

TEST_IMPL(peer_session_line_and_drain) {
  defaults();
  lim.max_conns = 1;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  sessions_written = drained = 0;
  ephd_peer_session(session_line, 48);
  ASSERT_EQ(go(p, 0, "/hold"), 0);
  ASSERT_EQ(go(p, 1, "/queued"), 0);
  RUN_UNTIL(srv_held() == 1);
  ASSERT_EQ(sessions_written, 1);
  ASSERT(strstr(srv.last, "X-Session: 1 127.0.0.1:") != NULL);
  ASSERT(strstr(srv.last, "\r\n\r\n") != NULL);
  ephd_peer_drain(on_drained);
  uv_run(&loop, UV_RUN_NOWAIT);
  ASSERT_EQ(drained, 0);
  ASSERT(srv_release());
  RUN_UNTIL(res[1].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_OK);
  /* The same connection: no second session. */
  ASSERT_EQ(sessions_written, 1);
  ASSERT(strstr(srv.last, "GET /queued ") == srv.last);
  ASSERT(strstr(srv.last, "X-Session") == NULL);
  RUN_UNTIL(drained);
  ASSERT_EQ(drained, 1);
  ASSERT_EQ(out_when_drained, 0);
  /* Nothing out: told on the next turn, never from inside the call. */
  ephd_peer_drain(on_drained);
  ASSERT_EQ(drained, 1);
  uv_run(&loop, UV_RUN_NOWAIT);
  ASSERT_EQ(drained, 2);
  /* A fresh connection opens its own. */
  ASSERT_EQ(go(p, 2, "/close"), 0);
  RUN_UNTIL(res[2].calls);
  ASSERT_EQ(go(p, 3, "/after"), 0);
  RUN_UNTIL(res[3].calls);
  ASSERT_EQ(res[3].kind, EPHD_PEER_OK);
  ASSERT_EQ(sessions_written, 2);
  ASSERT(strstr(srv.last, "X-Session: 2 ") != NULL);
  ephd_peer_session(NULL, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

TEST_IMPL(peer_addresses) {
  defaults();
  uv_loop_init(&loop);
  ephd_peer_init(&loop, &lim);
  const char *good[] = {"127.0.0.1:80", "[::1]:6632", "localhost:6632",
                        "broker-2.cell.internal:6632", "http://10.0.0.1:1/"};
  for (int i = 0; i < 5; i++) ASSERT(ephd_peer(good[i]) != NULL);
  ASSERT(ephd_peer("http://127.0.0.1:80/") == ephd_peer("127.0.0.1:80"));
  const char *bad[] = {
      "",       "127.0.0.1",  "::1:80",      "[::1]80",  "[::1]:",
      "host:0", "host:65536", "host:8x",     "ho st:80", "[1.2.3.4]:8",
      ":80",    "h:-1",       "http://h:1/x"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    if (ephd_peer(bad[i]) != NULL) {
      fprintf(stderr, "accepted %s\n", bad[i]);
      return 1;
    }
  ephd_peer_close_all();
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  return 0;
}

TEST_IMPL(peer_refuses_unusable_requests) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ephd_peer_request_t r = {S("GET"), S("/x"), S(""), S(""), 1000, 0,
                           0,        NULL,    0,     0,     NULL};
  ephd_peer_request_t bad[9];
  for (int i = 0; i < 9; i++) bad[i] = r;
  bad[0].timeout_ms = 0;
  bad[1].target = S("x");
  bad[2].target = S("/a b");
  bad[3].method = S("");
  bad[4].headers = S("X-A: 1"); /* no CRLF */
  bad[5].headers = S("X-A: 1\r\n\r\nGET /smuggled HTTP/1.1\r\n");
  bad[6].headers = S("X-A: 1\nX-B: 2\r\n");          /* bare LF */
  bad[7].headers = S("X-A: 1\rX-B: 2\r\n");          /* bare CR */
  bad[8].headers = (ephd_slice_t){"X-A: \0\r\n", 8}; /* a NUL */
  for (int i = 0; i < 9; i++)
    ASSERT_EQ(ephd_peer_send(p, &bad[i], on_done, &res[0], &handles[0]),
              EPHD_PEER_E_INVALID);
  ASSERT_EQ(st()->requests, 0);
  ASSERT_EQ(st()->failures[-EPHD_PEER_E_INVALID], 9);
  const char *name = ephd_peer_kind_name(EPHD_PEER_E_ANSWER_TIMEOUT);
  ASSERT_MEM_EQ(name, strlen(name), "answer_timeout");
  name = ephd_peer_kind_name(EPHD_PEER_E_INVALID);
  ASSERT_MEM_EQ(name, strlen(name), "invalid");
  name = ephd_peer_kind_name(-EPHD_PEER_NKINDS);
  ASSERT_MEM_EQ(name, strlen(name), "unknown");
  ASSERT_EQ(stop(), 0);
  ASSERT_EQ(res[0].calls, 0);
  ASSERT_EQ(srv.requests, 0);
  return 0;
}

/* IPv6 literals and names (resolved off the loop) reach their peer. */
TEST_IMPL(peer_ipv6_and_names) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  char addr[32];
  snprintf(addr, sizeof(addr), "localhost:%d", srv.port);
  ephd_peer_t *named = ephd_peer(addr);
  ASSERT_EQ(go(named, 0, "/by-name"), 0);
  ASSERT_EQ(go(named, 1, "/by-name-too"), 0);
  RUN_UNTIL(res[0].calls && res[1].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
  ASSERT_EQ(res[1].kind, EPHD_PEER_OK);
  ASSERT_EQ(stop(), 0);

  p = start_on("::1");
  if (p == NULL) { /* no IPv6 loopback here */
    ASSERT_EQ(stop(), 0);
    return 0;
  }
  ASSERT_EQ(go(p, 3, "/v6"), 0);
  RUN_UNTIL(res[3].calls);
  ASSERT_EQ(res[3].kind, EPHD_PEER_OK);
  ASSERT(strstr(srv.last, "Host: [::1]:") != NULL);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* --- pipes ------------------------------------------------------------- */

/* Sends GET target as request i on the pipe key chooses. */
static int go_key(ephd_peer_t *p, int i, const char *target,
                  uint64_t timeout_ms, uint32_t key) {
  ephd_peer_request_t req = {.method = S("GET"),
                             .target = S(target),
                             .headers = S(""),
                             .body = S(""),
                             .timeout_ms = timeout_ms,
                             .key = key};
  return ephd_peer_send(p, &req, on_done, &res[i], &handles[i]);
}

/* Everything a loop turn relays to a pipe goes in one write on one
 * connection, and the answers come back to their askers in order. */
TEST_IMPL(peer_pipe_one_write_in_order) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  char target[16][16];
  for (int i = 0; i < 16; i++) {
    snprintf(target[i], sizeof(target[i]), "/p%d", i);
    ASSERT_EQ(go_key(p, i, target[i], 5000, 7), 0);
  }
  ASSERT_EQ(res[0].calls, 0); /* never from inside send */
  RUN_UNTIL(ncalls == 16);
  for (int i = 0; i < 16; i++) {
    ASSERT_EQ(res[i].kind, EPHD_PEER_OK);
    ASSERT_EQ(res[i].order, i);
    ASSERT_MEM_EQ(res[i].body, res[i].body_len, target[i]);
  }
  ASSERT_EQ(srv.accepted, 1);
  ASSERT_EQ(st()->pipelined, 16);
  ASSERT_EQ(st()->pipe_writes, 1);
  /* Answered, the line stays open for the next turn's requests. */
  ASSERT_EQ(go_key(p, 0, "/again", 5000, 7), 0);
  RUN_UNTIL(ncalls == 17);
  ASSERT_MEM_EQ(res[0].body, res[0].body_len, "/again");
  ASSERT_EQ(srv.accepted, 1);
  ASSERT_EQ(st()->pipe_writes, 2);
  ASSERT_EQ(st()->in_flight, 0);
  ASSERT_EQ(st()->bytes, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* Requests relayed turn after turn, as a loop reading a stream of clients
 * relays them: each answer is checked to come back in the order sent. */
static struct {
  ephd_peer_t *peer;
  uv_prepare_t prepare;
  int to_send, sent, answered, in_order;
  ephd_peer_call_t *handle;
} stream;

static void on_stream_answer(void *data, int kind,
                             const ephd_peer_response_t *r) {
  char want[16];
  snprintf(want, sizeof(want), "/s%d", (int)(intptr_t)data);
  if (kind != EPHD_PEER_OK || r->body.len != strlen(want) ||
      memcmp(r->body.ptr, want, r->body.len) != 0 ||
      (int)(intptr_t)data != stream.answered)
    stream.in_order = 0;
  stream.answered++;
}

static void stream_send(void) {
  char target[16];
  snprintf(target, sizeof(target), "/s%d", stream.sent);
  ephd_peer_request_t req = {.method = S("GET"),
                             .target = S(target),
                             .headers = S(""),
                             .body = S(""),
                             .timeout_ms = 5000,
                             .key = 3};
  if (ephd_peer_send(stream.peer, &req, on_stream_answer,
                     (void *)(intptr_t)stream.sent, &stream.handle) == 0)
    stream.sent++;
}

/* One request each loop turn (before the poll), until to_send are out. */
static void on_stream_turn(uv_prepare_t *h) {
  if (stream.sent == stream.to_send) {
    uv_prepare_stop(h);
    return;
  }
  stream_send();
}

static void stream_start(ephd_peer_t *p, int n) {
  stream.peer = p;
  stream.to_send = stream.sent + n;
  uv_prepare_start(&stream.prepare, on_stream_turn);
}

/* A pipe's write waits while every loop turn still relays: requests sent
 * over six turns in a row go in one write (each turn's alone would be six
 * writes, and six wake-ups of the owner), in order. The wait is bounded:
 * a request every turn for forty turns is not held to the end. And a
 * whole write's worth goes at the end of the turn that relayed it. */
TEST_IMPL(peer_pipe_write_waits_for_a_quiet_turn) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  memset(&stream, 0, sizeof(stream));
  stream.in_order = 1;
  uv_prepare_init(&loop, &stream.prepare);
  /* The line open first: a connection's opening writes what waited. */
  ASSERT_EQ(go_key(p, 0, "/open", 5000, 3), 0);
  RUN_UNTIL(ncalls == 1);
  ASSERT_EQ(st()->pipe_writes, 1);

  stream_start(p, 6);
  RUN_UNTIL(stream.answered == 6);
  ASSERT(stream.in_order);
  ASSERT_EQ(st()->pipe_writes, 2);

  stream_start(p, 40);
  RUN_UNTIL(stream.answered == 46);
  ASSERT(stream.in_order);
  uint64_t writes = st()->pipe_writes - 2;
  ASSERT(writes >= 4); /* held at most 8 turns: a write in 9 turns */
  ASSERT(writes < 40);

  /* 64 in one turn: written in that turn's end, though it relayed. */
  uint64_t before = st()->pipe_writes;
  for (int i = 0; i < 64; i++) stream_send();
  uv_run(&loop, UV_RUN_NOWAIT);
  ASSERT_EQ(st()->pipe_writes, before + 1);
  RUN_UNTIL(stream.answered == 110);
  ASSERT(stream.in_order);

  uv_close((uv_handle_t *)&stream.prepare, NULL);
  ASSERT_EQ(st()->in_flight, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* A whole write's worth relayed in the turn the peer resets the line
 * (its reset arriving after the poll, before the write): the kernel takes
 * none of the write, so those requests were never written, and go on a
 * fresh connection; only the one the peer read fails. */
static ephd_peer_t *reset_peer;
static int victims_ok, victims_failed;
static void on_victim(void *data, int kind, const ephd_peer_response_t *r) {
  (void)data;
  (void)r;
  if (kind == EPHD_PEER_OK)
    victims_ok++;
  else
    victims_failed++;
}

static void send_victims(void) {
  for (int i = 0; i < 64; i++) {
    ephd_peer_request_t req = {.method = S("GET"),
                               .target = S("/victim"),
                               .headers = S(""),
                               .body = S(""),
                               .timeout_ms = 5000,
                               .key = 1};
    ephd_peer_call_t *h;
    ephd_peer_send(reset_peer, &req, on_victim, NULL, &h);
  }
}

TEST_IMPL(peer_pipe_unwritten_resent_after_reset) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  reset_peer = p;
  victims_ok = victims_failed = 0;
  srv.on_reset = send_victims;
  ASSERT_EQ(go_key(p, 0, "/reset-line", 5000, 1), 0);
  RUN_UNTIL(res[0].calls && victims_ok + victims_failed == 64);
  ASSERT_EQ(res[0].kind, EPHD_PEER_E_CLOSED); /* read: may be applied */
  ASSERT_EQ(victims_failed, 0);
  ASSERT_EQ(victims_ok, 64);
  ASSERT_EQ(st()->retries, 64);
  ASSERT_EQ(srv.accepted, 2);
  ASSERT_EQ(srv.requests, 65); /* each read once */
  ASSERT_EQ(st()->in_flight, 0);
  ASSERT_EQ(st()->bytes, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* A key keeps its pipe; pipes are lines of their own, so a held request
 * holds only its own pipe, and a parked one holds no pipe at all. */
TEST_IMPL(peer_pipes_apart) {
  defaults();
  lim.pipes = 2;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go_key(p, 0, "/hold-a", 5000, 2), 0);
  ASSERT_EQ(go_key(p, 1, "/behind-a", 5000, 4), 0); /* the same pipe */
  ASSERT_EQ(go_key(p, 2, "/other", 5000, 3), 0);
  ASSERT_EQ(go_as(p, 3, "/hold-parked", 5000, 1), 0);
  RUN_UNTIL(res[2].calls);
  ASSERT_EQ(res[2].kind, EPHD_PEER_OK);
  RUN_UNTIL(srv_held() == 2);
  ASSERT_EQ(res[1].calls, 0); /* in order behind the held one */
  ASSERT_EQ(srv.accepted, 3);
  ASSERT(holding("/hold-a") != NULL);
  sconn_t *a = holding("/hold-a");
  release(a);
  RUN_UNTIL(res[1].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
  ASSERT_MEM_EQ(res[0].body, res[0].body_len, "/hold-a");
  ASSERT_MEM_EQ(res[1].body, res[1].body_len, "/behind-a");
  ASSERT_EQ(res[0].order + 1, res[1].order);
  ASSERT_EQ(res[3].calls, 0);
  ASSERT_EQ(srv_release(), 1);
  RUN_UNTIL(res[3].calls);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* The peer goes with requests written: those it may have read fail and
 * are never sent again; one asked for in the callback of an answer that
 * closes the line was never written, and goes on a fresh connection. */
static ephd_peer_t *chain_pipe;
static void on_then_send(void *data, int kind, const ephd_peer_response_t *r) {
  on_done(data, kind, r);
  go_key(chain_pipe, 5, "/after-close", 5000, 1);
}

TEST_IMPL(peer_pipe_lost_connection) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  chain_pipe = p;
  /* Written together: the first answer says close, so the second, read
   * or not by the peer, fails. */
  ephd_peer_request_t req = {.method = S("GET"),
                             .target = S("/close-me"),
                             .headers = S(""),
                             .body = S(""),
                             .timeout_ms = 5000,
                             .key = 1};
  ASSERT_EQ(ephd_peer_send(p, &req, on_then_send, &res[0], &handles[0]), 0);
  ASSERT_EQ(go_key(p, 1, "/behind-close", 5000, 1), 0);
  RUN_UNTIL(res[1].calls && res[5].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
  ASSERT_EQ(res[1].kind, EPHD_PEER_E_CLOSED);
  ASSERT_EQ(res[5].kind, EPHD_PEER_OK);
  ASSERT_MEM_EQ(res[5].body, res[5].body_len, "/after-close");
  ASSERT_EQ(srv.accepted, 2);
  /* An answer, then one silent: the peer resets with the second read.
   * It was written after the line had carried an answer it had not
   * finished with: never resent. */
  ASSERT_EQ(go_key(p, 2, "/fine", 5000, 1), 0);
  ASSERT_EQ(go_key(p, 3, "/silent", 5000, 1), 0);
  RUN_UNTIL(res[2].calls && srv.requests == 5);
  srv_drop_all();
  RUN_UNTIL(res[3].calls);
  ASSERT_EQ(res[2].kind, EPHD_PEER_OK);
  ASSERT_EQ(res[3].kind, EPHD_PEER_E_CLOSED);
  ASSERT_EQ(st()->retries, 0);
  ASSERT_EQ(srv.requests, 5); /* each sent once */
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* The peer closes a line it saw idle just as requests go out on it: it
 * read none of them, so they are written once more, in order. */
TEST_IMPL(peer_pipe_resend_after_idle_close) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go_key(p, 0, "/first", 5000, 1), 0);
  RUN_UNTIL(res[0].calls);
  ASSERT_EQ(go_key(p, 1, "/second", 5000, 1), 0);
  ASSERT_EQ(go_key(p, 2, "/third", 5000, 1), 0);
  /* The first turn that relays nothing writes them (at its end); the peer
   * closes before reading. */
  RUN_UNTIL(st()->pipe_writes == 2);
  ASSERT_EQ(srv.requests, 1);
  srv_drop_all();
  RUN_UNTIL(res[2].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_OK);
  ASSERT_EQ(res[2].kind, EPHD_PEER_OK);
  ASSERT_EQ(res[1].order + 1, res[2].order);
  ASSERT_MEM_EQ(res[2].body, res[2].body_len, "/third");
  ASSERT_EQ(st()->retries, 2);
  ASSERT_EQ(srv.requests, 3); /* the first peer connection read neither */
  ASSERT_EQ(srv.accepted, 2);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* The oldest answer's deadline drops the line: it and every request
 * written behind it fail answer_timeout; the next request gets a fresh
 * line. */
TEST_IMPL(peer_pipe_deadline) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go_key(p, 0, "/silent", 50, 1), 0);
  ASSERT_EQ(go_key(p, 1, "/behind", 5000, 1), 0);
  RUN_UNTIL(res[0].calls && res[1].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_E_ANSWER_TIMEOUT);
  ASSERT_EQ(res[1].kind, EPHD_PEER_E_ANSWER_TIMEOUT);
  ASSERT_EQ(go_key(p, 2, "/next", 5000, 1), 0);
  RUN_UNTIL(res[2].calls);
  ASSERT_EQ(res[2].kind, EPHD_PEER_OK);
  ASSERT_EQ(srv.accepted, 2);
  ASSERT_EQ(st()->retries, 0);
  /* A pipe that cannot connect: its requests fail connect_timeout. */
  int fds[2];
  int port = blackhole(fds);
  ASSERT(port > 0);
  char addr[32];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  ephd_peer_t *hole = ephd_peer(addr);
  ASSERT_EQ(go_key(hole, 3, "/never", 50, 1), 0);
  RUN_UNTIL(res[3].calls);
  ASSERT_EQ(res[3].kind, EPHD_PEER_E_CONNECT_TIMEOUT);
  close(fds[0]);
  close(fds[1]);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* A written request cancelled: its answer is read and dropped, and the
 * one behind it still gets its own answer on the same line. */
TEST_IMPL(peer_pipe_cancel_written) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go_key(p, 0, "/hold-x", 5000, 1), 0);
  ASSERT_EQ(go_key(p, 1, "/y", 5000, 1), 0);
  ASSERT_EQ(go_key(p, 2, "/never-written", 5000, 1), 0);
  ephd_peer_cancel(handles[2]); /* not written yet: simply dropped */
  RUN_UNTIL(srv_held() == 1);
  ephd_peer_cancel(handles[0]);
  ASSERT_EQ(st()->connections_open, 1);
  ASSERT_EQ(srv_release(), 1);
  RUN_UNTIL(res[1].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_OK);
  ASSERT_MEM_EQ(res[1].body, res[1].body_len, "/y");
  ASSERT_EQ(res[0].calls, 0);
  ASSERT_EQ(res[2].calls, 0);
  ASSERT_EQ(srv.requests, 2);
  ASSERT_EQ(srv.accepted, 1);
  ASSERT_EQ(st()->cancelled, 2);
  ASSERT_EQ(st()->in_flight, 0);
  ASSERT_EQ(st()->bytes, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* A stop tells every pipe's request, written or not; a peer's pipes
 * hold at most max_conns + max_queued; the session line goes on a line's
 * first request only. */
TEST_IMPL(peer_pipe_stop_bound_session) {
  defaults();
  lim.max_conns = 2;
  lim.max_queued = 1;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  sessions_written = 0;
  ephd_peer_session(session_line, 48);
  ASSERT_EQ(go_key(p, 0, "/hold-1", 5000, 1), 0);
  ASSERT_EQ(go_key(p, 1, "/b", 5000, 1), 0);
  ASSERT_EQ(go_key(p, 2, "/c", 5000, 2), 0);
  ASSERT_EQ(go_key(p, 3, "/d", 5000, 1), EPHD_PEER_E_QUEUE_FULL);
  RUN_UNTIL(srv_held() == 1 && res[2].calls);
  ASSERT_EQ(sessions_written, 2); /* one a line, of three requests */
  ephd_peer_close_all();
  ASSERT_EQ(res[0].kind, EPHD_PEER_E_STOPPING);
  ASSERT_EQ(res[1].kind, EPHD_PEER_E_STOPPING);
  ASSERT_EQ(res[3].calls, 0);
  ephd_peer_session(NULL, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* One share holds at most max_parked_share of a peer's parking lane,
 * in flight and waiting; another share still parks, and a share's slot
 * is its own again once its request ends. */
TEST_IMPL(peer_parked_share) {
  defaults();
  lim.max_parked = 2;
  lim.max_parked_share = 2;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ephd_peer_request_t req = {.method = S("GET"),
                             .target = S("/hold-t1"),
                             .headers = S(""),
                             .body = S(""),
                             .timeout_ms = 5000,
                             .parks = 1,
                             .share = 11};
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[0], &handles[0]), 0);
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[1], &handles[1]), 0);
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[2], &handles[2]),
            EPHD_PEER_E_SHARE);
  /* The lane is full, but not of share 22's: it waits for a slot. */
  req.share = 22;
  req.target = S("/hold-t2");
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[3], &handles[3]), 0);
  RUN_UNTIL(srv_held() == 2);
  ASSERT_EQ(st()->queued, 1);
  ASSERT_EQ(st()->failures[-EPHD_PEER_E_SHARE], 1);
  ASSERT_EQ(srv_release(), 1);
  RUN_UNTIL(res[0].calls && srv_held() == 2);
  req.share = 11;
  req.target = S("/hold-t1");
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[4], &handles[4]), 0);
  ephd_peer_cancel(handles[4]);
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[5], &handles[5]), 0);
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[6], &handles[6]),
            EPHD_PEER_E_SHARE);
  ASSERT_EQ(stop(), 0);
  ASSERT_EQ(res[3].kind, EPHD_PEER_E_STOPPING);
  return 0;
}

/* A borrowed body larger than a peer's socket buffers take at once: its
 * write stays unfinished while the peer does not read. */
#define BIG_BODY (32u << 20)

static char *big_body(void) {
  char *body = malloc(BIG_BODY);
  if (body) memset(body, 'x', BIG_BODY);
  return body;
}

/* A POST of body (BIG_BODY, borrowed) to target on the pipe key chooses. */
static ephd_peer_request_t big_post(const char *target, char *body,
                                    uint32_t key) {
  ephd_peer_request_t req = {.method = S("POST"),
                             .target = S(target),
                             .headers = S(""),
                             .body = {body, BIG_BODY},
                             .timeout_ms = 5000,
                             .borrows = 1,
                             .key = key};
  return req;
}
/* A line that had answered everything, then carried a request the peer
 * read and holds, and behind it a large borrowed body the peer does not
 * read: the body's asker leaves while the write still holds its bytes,
 * so the line is dropped by us, not closed by the peer. The held request
 * was read (it may be applied): it fails, and is never written again. */
TEST_IMPL(peer_pipe_cancel_mid_write_resends_nothing) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go_key(p, 0, "/first", 5000, 1), 0);
  RUN_UNTIL(res[0].calls); /* the line is quiet: every answer read */
  ASSERT_EQ(go_key(p, 1, "/hold-read", 5000, 1), 0);
  RUN_UNTIL(srv_held() == 1);
  sconn_t *s = holding("/hold-read");
  uv_read_stop((uv_stream_t *)&s->tcp); /* nothing more is read */
  char *body = big_body();
  ASSERT(body != NULL);
  ephd_peer_request_t req = big_post("/big", body, 1);
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[2], &handles[2]), 0);
  RUN_UNTIL(st()->pipe_writes == 3);
  ephd_peer_cancel(handles[2]);
  free(body); /* the asker's body is gone with it */
  RUN_UNTIL(res[1].calls || st()->retries);
  ASSERT_EQ(res[1].kind, EPHD_PEER_E_CLOSED);
  ASSERT_EQ(st()->retries, 0);
  ASSERT_EQ(srv.requests, 2); /* /hold-read was read once, never again */
  ASSERT_EQ(st()->in_flight, 0);
  ASSERT_EQ(st()->bytes, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* The asker's callback frees the borrowed body, as the relay's does. */
static char *early_body;
static uint64_t open_at_answer;
static void on_early(void *data, int kind, const ephd_peer_response_t *r) {
  open_at_answer = st()->connections_open;
  on_done(data, kind, r);
  free(early_body);
  early_body = NULL;
}

/* A peer that answers a piped request before it read the request's body:
 * the line still writing that body is ended before the asker hears (its
 * borrowed body goes with it), never written from after. */
TEST_IMPL(peer_pipe_answer_before_body_read) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  early_body = big_body();
  ASSERT(early_body != NULL);
  ephd_peer_request_t req = big_post("/early", early_body, 1);
  ASSERT_EQ(ephd_peer_send(p, &req, on_early, &res[0], &handles[0]), 0);
  RUN_UNTIL(res[0].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
  ASSERT_MEM_EQ(res[0].body, res[0].body_len, "/early");
  ASSERT_EQ(open_at_answer, 0); /* the line was ended first */
  /* The peer reads again: nothing of the freed body may reach it. */
  for (sconn_t *c = srv.conns; c; c = c->next)
    uv_read_start((uv_stream_t *)&c->tcp, on_sdiscard_alloc, on_sdiscard);
  RUN_UNTIL(srv.open == 0);
  ASSERT_EQ(go_key(p, 1, "/next", 5000, 1), 0);
  RUN_UNTIL(res[1].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_OK);
  ASSERT_EQ(st()->in_flight, 0);
  ASSERT_EQ(st()->bytes, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* A written request cancelled while a later write, carrying another
 * asker's body, is unfinished: its own bytes are all out, so the line
 * stays; its answer is read and dropped, and the later request is not
 * failed for it. */
TEST_IMPL(peer_pipe_cancel_behind_unfinished_write) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go_key(p, 0, "/hold-read", 5000, 1), 0);
  RUN_UNTIL(srv_held() == 1);
  sconn_t *s = holding("/hold-read");
  uv_read_stop((uv_stream_t *)&s->tcp);
  char *body = big_body();
  ASSERT(body != NULL);
  ephd_peer_request_t req = big_post("/big", body, 1);
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[1], &handles[1]), 0);
  RUN_UNTIL(st()->pipe_writes == 2);
  ephd_peer_cancel(handles[0]);
  ASSERT_EQ(srv_release(), 1); /* its answer comes, and is dropped */
  RUN_UNTIL(st()->in_flight == 1);
  ASSERT_EQ(st()->connections_open, 1);
  ASSERT_EQ(res[0].calls, 0);
  ASSERT_EQ(res[1].calls, 0);
  ASSERT_EQ(stop(), 0);
  ASSERT_EQ(res[1].kind, EPHD_PEER_E_STOPPING);
  free(body);
  return 0;
}

/* An asker that can wait for its borrowed body (release) has it lent when
 * it leaves while the body is being written: the line stays for the
 * others' answers, and the body comes back once the write is over, or
 * once the line is lost. */
static int released;
static void on_release(void *data) {
  released++;
  free(*(char **)data);
}

TEST_IMPL(peer_pipe_cancel_lends_borrowed_body) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  released = 0;
  char *bodies[2];
  for (int k = 0; k < 2; k++) {
    uint32_t key = (uint32_t)k + 1;
    const char *held = k ? "/hold-two" : "/hold-one";
    ASSERT_EQ(go_key(p, 2 * k, held, 5000, key), 0);
    RUN_UNTIL(srv_held() == k + 1);
    uv_read_stop((uv_stream_t *)&holding(held)->tcp);
    bodies[k] = big_body();
    ASSERT(bodies[k] != NULL);
    ephd_peer_request_t req = big_post("/big", bodies[k], key);
    req.release = on_release;
    ASSERT_EQ(ephd_peer_send(p, &req, on_done, &bodies[k], &handles[2 * k + 1]),
              0);
    RUN_UNTIL(st()->pipe_writes == (uint64_t)(2 * k + 2));
    ASSERT_EQ(ephd_peer_cancel(handles[2 * k + 1]), 1);
    ASSERT_EQ(released, 0);
    ASSERT_EQ(st()->connections_open, (uint64_t)(k + 1));
  }
  /* The first peer reads it all: the body is given back, and the held
   * request still gets its own answer on that line. */
  sconn_t *one = holding("/hold-one");
  uv_read_start((uv_stream_t *)&one->tcp, on_sdiscard_alloc, on_sdiscard);
  RUN_UNTIL(released == 1);
  echo(one, "/hold-one", "");
  RUN_UNTIL(res[0].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
  ASSERT_MEM_EQ(res[0].body, res[0].body_len, "/hold-one");
  /* The second resets its line: what it read fails, the body comes back
   * as its write is cancelled. */
  sconn_close(holding("/hold-two"), 1);
  RUN_UNTIL(released == 2 && res[2].calls);
  ASSERT_EQ(res[2].kind, EPHD_PEER_E_CLOSED);
  ASSERT_EQ(st()->retries, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* A write of a small request and a large one behind it: the peer answers
 * the small one while the large one's body is still going out. That is
 * no early answer (the small one was all written): the line stays. */
TEST_IMPL(peer_pipe_answer_while_later_body_written) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  discarded = 0;
  char *body = big_body();
  ASSERT(body != NULL);
  ASSERT_EQ(go_key(p, 0, "/then-discard", 5000, 1), 0);
  ephd_peer_request_t req = big_post("/big", body, 1);
  ASSERT_EQ(ephd_peer_send(p, &req, on_done, &res[1], &handles[1]), 0);
  RUN_UNTIL(res[0].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
  ASSERT_EQ(st()->pipe_writes, 1);
  RUN_UNTIL(discarded + sizeof(discard) >= BIG_BODY || res[1].calls);
  ASSERT_EQ(res[1].calls, 0);
  ASSERT_EQ(st()->connections_open, 1);
  ASSERT_EQ(stop(), 0);
  ASSERT_EQ(res[1].kind, EPHD_PEER_E_STOPPING);
  free(body);
  return 0;
}

/* Pipes to a name: the requests wait for its resolution, then go in one
 * write; a name that does not resolve fails them all (resolve), and the
 * next ones too, without a hang; the name's other addresses are tried. */
TEST_IMPL(peer_pipe_names) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  char addr[32];
  snprintf(addr, sizeof(addr), "localhost:%d", srv.port);
  ephd_peer_t *named = ephd_peer(addr);
  for (int i = 0; i < 3; i++) ASSERT_EQ(go_key(named, i, "/n", 5000, 1), 0);
  RUN_UNTIL(ncalls == 3);
  for (int i = 0; i < 3; i++) ASSERT_EQ(res[i].kind, EPHD_PEER_OK);
  ephd_peer_t *nowhere = ephd_peer("no-such-member.invalid:80");
  ASSERT(nowhere != NULL);
  for (int round = 0; round < 2; round++) {
    for (int i = 3; i < 6; i++)
      ASSERT_EQ(go_key(nowhere, i, "/x", 2000, (uint32_t)i), 0);
    RUN_UNTIL(ncalls == 6 + 3 * round);
    for (int i = 3; i < 6; i++) ASSERT_EQ(res[i].kind, EPHD_PEER_E_RESOLVE);
  }
  ASSERT_EQ(st()->in_flight, 0);
  ASSERT_EQ(st()->bytes, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* An asker that sends again from the callback of a pipe's failed
 * connection: its new request gets a connection of its own to try, not
 * the failure of the one before it (an asker that always retried would
 * have held the loop in that callback for ever). */
static int resends_left;
static ephd_peer_t *resend_peer;
static void on_resend(void *data, int kind, const ephd_peer_response_t *r) {
  on_done(data, kind, r);
  if (resends_left-- > 0) {
    ephd_peer_request_t req = {.method = S("GET"),
                               .target = S("/again"),
                               .headers = S(""),
                               .body = S(""),
                               .timeout_ms = 2000,
                               .key = 1};
    ephd_peer_send(resend_peer, &req, on_resend, data, &handles[0]);
  }
}

TEST_IMPL(peer_pipe_send_from_connect_failure) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  /* A port nobody listens on: connects are refused. */
  uv_tcp_t hole;
  struct sockaddr_in a;
  uv_ip4_addr("127.0.0.1", 0, &a);
  uv_tcp_init(&loop, &hole);
  ASSERT_EQ(uv_tcp_bind(&hole, (struct sockaddr *)&a, 0), 0);
  int len = sizeof(a);
  uv_tcp_getsockname(&hole, (struct sockaddr *)&a, &len);
  char addr[32];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(a.sin_port));
  uv_close((uv_handle_t *)&hole, NULL);
  resend_peer = ephd_peer(addr);
  resends_left = 3;
  uint64_t opened = st()->connections_opened;
  ephd_peer_request_t req = {.method = S("GET"),
                             .target = S("/first"),
                             .headers = S(""),
                             .body = S(""),
                             .timeout_ms = 2000,
                             .key = 1};
  ASSERT_EQ(ephd_peer_send(resend_peer, &req, on_resend, &res[0], &handles[0]),
            0);
  RUN_UNTIL(res[0].calls == 4);
  ASSERT_EQ(res[0].kind, EPHD_PEER_E_CONNECT);
  ASSERT_EQ(st()->connections_opened - opened, 4);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* A request sent from a callback the peer's timer runs, on a pipe the
 * timer had already looked at: its deadline still holds (the timer, set
 * again for the pipes it had seen, kept the sooner due the send set). */
static uint64_t sent_at, failed_at;
static void on_late(void *data, int kind, const ephd_peer_response_t *r) {
  on_done(data, kind, r);
  failed_at = uv_now(&loop);
}
static void on_send_behind(void *data, int kind,
                           const ephd_peer_response_t *r) {
  on_done(data, kind, r);
  ephd_peer_request_t req = {.method = S("GET"),
                             .target = S("/silent-late"),
                             .headers = S(""),
                             .body = S(""),
                             .timeout_ms = 100,
                             .key = 3}; /* pipe 0 */
  sent_at = uv_now(&loop);
  ephd_peer_send(chain_pipe, &req, on_late, &res[2], &handles[2]);
}

TEST_IMPL(peer_pipe_deadline_of_send_from_timer) {
  defaults();
  lim.pipes = 3;
  lim.idle_timeout_ms = 3000;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  chain_pipe = p;
  ASSERT_EQ(go_key(p, 0, "/warm", 5000, 3), 0); /* pipe 0, then idle */
  RUN_UNTIL(res[0].calls);
  ephd_peer_request_t req = {.method = S("GET"),
                             .target = S("/silent"),
                             .headers = S(""),
                             .body = S(""),
                             .timeout_ms = 50,
                             .key = 1}; /* pipe 1 */
  ASSERT_EQ(ephd_peer_send(p, &req, on_send_behind, &res[1], &handles[1]), 0);
  RUN_UNTIL(res[2].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_E_ANSWER_TIMEOUT);
  ASSERT_EQ(res[2].kind, EPHD_PEER_E_ANSWER_TIMEOUT);
  ASSERT(failed_at - sent_at < 1000);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* A pipe's connection that is still connecting when its requests' deadline
 * passes is given up with them: the next request tries a fresh one, not
 * the same attempt the kernel may retry for minutes (a member behind a
 * network that dropped its SYNs, and then healed). */
TEST_IMPL(peer_pipe_connect_given_up) {
  defaults();
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  int fds[2];
  int port = blackhole(fds);
  ASSERT(port > 0);
  char addr[32];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  ephd_peer_t *hole = ephd_peer(addr);
  uint64_t opened = st()->connections_opened;
  ASSERT_EQ(go_key(hole, 0, "/never", 50, 1), 0);
  RUN_UNTIL(res[0].calls);
  ASSERT_EQ(res[0].kind, EPHD_PEER_E_CONNECT_TIMEOUT);
  ASSERT_EQ(st()->connections_open, 0);
  ASSERT_EQ(go_key(hole, 1, "/again", 50, 1), 0);
  RUN_UNTIL(res[1].calls);
  ASSERT_EQ(res[1].kind, EPHD_PEER_E_CONNECT_TIMEOUT);
  ASSERT_EQ(st()->connections_opened - opened, 2);
  close(fds[0]);
  close(fds[1]);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* A pipe's connection that opens after every request it was opened for
 * went (cancelled while it connected) closes once idle, as any other. */
TEST_IMPL(peer_pipe_idle_after_empty_connect) {
  defaults();
  lim.idle_timeout_ms = 100;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go_key(p, 0, "/gone", 5000, 1), 0);
  ephd_peer_cancel(handles[0]);
  RUN_UNTIL(srv.accepted == 1);
  RUN_UNTIL(st()->connections_open == 0);
  ASSERT_EQ(res[0].calls, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}

/* A pipe's answer past the body limit fails the line (too_large) with
 * every request written on it; the next request gets a fresh line. */
TEST_IMPL(peer_pipe_answer_too_large) {
  defaults();
  lim.max_response_bytes = 16;
  ephd_peer_t *p = start();
  ASSERT(p != NULL);
  ASSERT_EQ(go_key(p, 0, "/ok", 5000, 1), 0);
  ASSERT_EQ(go_key(p, 1, "/far-too-long-an-answer-to-take", 5000, 1), 0);
  ASSERT_EQ(go_key(p, 2, "/behind", 5000, 1), 0);
  RUN_UNTIL(ncalls == 3);
  ASSERT_EQ(res[0].kind, EPHD_PEER_OK);
  ASSERT_EQ(res[1].kind, EPHD_PEER_E_TOO_LARGE);
  ASSERT_EQ(res[2].kind, EPHD_PEER_E_TOO_LARGE);
  ASSERT_EQ(go_key(p, 3, "/next", 5000, 1), 0);
  RUN_UNTIL(res[3].calls);
  ASSERT_EQ(res[3].kind, EPHD_PEER_OK);
  ASSERT_EQ(srv.accepted, 2);
  ASSERT_EQ(st()->retries, 0);
  ASSERT_EQ(st()->in_flight, 0);
  ASSERT_EQ(stop(), 0);
  return 0;
}
