#include "client.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void load_die(const char *what, const char *detail) {
  fprintf(stderr, "ephd-load: %s: %s\n", what, detail);
  exit(2);
}

void load_buf_reserve(load_buf_t *b, size_t more) {
  if (b->len + more <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + more) cap *= 2;
  b->data = realloc(b->data, cap);
  if (b->data == NULL) load_die("out of memory", "buffer");
  b->cap = cap;
}

void load_buf_add(load_buf_t *b, const void *data, size_t len) {
  load_buf_reserve(b, len);
  memcpy(b->data + b->len, data, len);
  b->len += len;
}

void load_buf_addf(load_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  load_buf_reserve(b, (size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

static void check(int rc, const char *what) {
  if (rc < 0) load_die(what, uv_strerror(rc));
}

/* HTTP responses --------------------------------------------------------- */

static int on_message_begin(llhttp_t *p) {
  load_conn_t *c = p->data;
  c->body.len = 0;
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  load_conn_t *c = p->data;
  load_buf_add(&c->body, at, len);
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  load_conn_t *c = p->data;
  c->on_reply(c, p->status_code, c->body.data, c->body.len);
  return 0;
}

static llhttp_settings_t http_settings;

static void read_http(load_conn_t *c, const char *data, size_t len) {
  llhttp_errno_t err = llhttp_execute(&c->parser, data, len);
  if (err != HPE_OK)
    load_die("bad HTTP response", llhttp_get_error_reason(&c->parser));
}

/* RESP replies ----------------------------------------------------------- */

/* Parses one whole reply at p; returns its length, 0 if it is not all here
 * yet. A bulk reply leaves its string in *bulk (an array, its last one). */
static size_t resp_parse(const char *p, size_t n, int *type, const char **bulk,
                         size_t *bulk_len) {
  const char *eol = memchr(p, '\r', n);
  if (eol == NULL || (size_t)(eol - p) + 2 > n) return 0;
  size_t head = (size_t)(eol - p) + 2;
  long long v = strtoll(p + 1, NULL, 10);
  *type = p[0];
  switch (p[0]) {
    case '+':
    case '-':
    case ':':
      return head;
    case '$':
      if (v < 0) {
        *type = 0;
        return head;
      }
      if (head + (size_t)v + 2 > n) return 0;
      *bulk = p + head;
      *bulk_len = (size_t)v;
      return head + (size_t)v + 2;
    case '*': {
      if (v < 0) {
        *type = 0;
        return head;
      }
      size_t at = head;
      for (long long i = 0; i < v; i++) {
        int t;
        size_t used = resp_parse(p + at, n - at, &t, bulk, bulk_len);
        if (used == 0) return 0;
        at += used;
      }
      return at;
    }
    default:
      load_die("bad RESP reply", p);
      return 0;
  }
}

static void read_resp(load_conn_t *c, const char *data, size_t len) {
  const char *p = data;
  size_t n = len;
  if (c->in.len > 0) {
    load_buf_add(&c->in, data, len);
    p = c->in.data;
    n = c->in.len;
  }
  size_t at = 0;
  for (;;) {
    int type = 0;
    const char *bulk = NULL;
    size_t bulk_len = 0;
    size_t used = resp_parse(p + at, n - at, &type, &bulk, &bulk_len);
    if (used == 0) break;
    at += used;
    c->on_reply(c, type, bulk, bulk_len);
  }
  if (p == c->in.data) {
    memmove(c->in.data, c->in.data + at, n - at);
    c->in.len = n - at;
  } else if (at < n) {
    load_buf_add(&c->in, p + at, n - at);
  }
}

/* The socket ------------------------------------------------------------- */

/* One read buffer for all connections: the loop reads one socket at a time
 * and each reader consumes or copies what it was given. */
static char read_buffer[256 * 1024];

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  buf->base = read_buffer;
  buf->len = sizeof(read_buffer);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  load_conn_t *c = s->data;
  if (nread == 0) return;
  if (nread < 0) load_die("connection lost", uv_strerror((int)nread));
  if (c->proto == LOAD_HTTP)
    read_http(c, buf->base, (size_t)nread);
  else
    read_resp(c, buf->base, (size_t)nread);
}

static void on_connected(uv_connect_t *req, int status) {
  load_conn_t *c = req->data;
  check(status, "connect");
  check(uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read), "read");
  c->on_connect(c);
}

void load_conn_open(uv_loop_t *loop, load_conn_t *c, load_proto_t proto,
                    int port, load_connect_cb on_connect,
                    load_reply_cb on_reply) {
  static int settings_ready;
  if (!settings_ready) {
    llhttp_settings_init(&http_settings);
    http_settings.on_message_begin = on_message_begin;
    http_settings.on_body = on_body;
    http_settings.on_message_complete = on_message_complete;
    settings_ready = 1;
  }
  c->proto = proto;
  c->on_connect = on_connect;
  c->on_reply = on_reply;
  llhttp_init(&c->parser, HTTP_RESPONSE, &http_settings);
  c->parser.data = c;
  check(uv_tcp_init(loop, &c->tcp), "tcp");
  uv_tcp_nodelay(&c->tcp, 1);
  c->tcp.data = c;
  c->connect.data = c;
  struct sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", port, &addr);
  check(uv_tcp_connect(&c->connect, &c->tcp, (const struct sockaddr *)&addr,
                       on_connected),
        "connect");
}

typedef struct {
  uv_write_t req;
  char data[];
} pending_write_t;

static void on_written(uv_write_t *req, int status) {
  check(status, "write");
  free(req);
}

void load_conn_send(load_conn_t *c, const char *data, size_t len) {
  uv_stream_t *s = (uv_stream_t *)&c->tcp;
  size_t done = 0;
  /* Bytes already queued must go first: only try when nothing waits. */
  if (uv_stream_get_write_queue_size(s) == 0) {
    uv_buf_t buf = uv_buf_init((char *)data, (unsigned)len);
    int n = uv_try_write(s, &buf, 1);
    if (n > 0) done = (size_t)n;
    else if (n != UV_EAGAIN) check(n, "write");
  }
  if (done == len) return;
  pending_write_t *w = malloc(sizeof(*w) + (len - done));
  if (w == NULL) load_die("out of memory", "write");
  memcpy(w->data, data + done, len - done);
  uv_buf_t rest = uv_buf_init(w->data, (unsigned)(len - done));
  check(uv_write(&w->req, s, &rest, 1, on_written), "write");
}

static void on_closed(uv_handle_t *h) {
  load_conn_t *c = h->data;
  free(c->body.data);
  free(c->in.data);
  c->body = (load_buf_t){0};
  c->in = (load_buf_t){0};
}

void load_conn_close(load_conn_t *c) {
  if (!uv_is_closing((uv_handle_t *)&c->tcp))
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

/* Requests --------------------------------------------------------------- */

void load_http_request(load_buf_t *b, const char *method, const char *path,
                       const char *body, size_t body_len) {
  if (body == NULL) {
    load_buf_addf(b, "%s %s HTTP/1.1\r\nHost: bench\r\n\r\n", method, path);
    return;
  }
  load_buf_addf(b,
                "%s %s HTTP/1.1\r\nHost: bench\r\n"
                "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                method, path, body_len);
  load_buf_add(b, body, body_len);
}

void load_resp_command(load_buf_t *b, int argc, const char **argv,
                       const size_t *lens) {
  load_buf_addf(b, "*%d\r\n", argc);
  for (int i = 0; i < argc; i++) {
    load_buf_addf(b, "$%zu\r\n", lens[i]);
    load_buf_add(b, argv[i], lens[i]);
    load_buf_add(b, "\r\n", 2);
  }
}
