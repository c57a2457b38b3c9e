/* The plain answer reader against llhttp: whenever peer_answer.c says an
 * answer is plain, llhttp, configured as peer_client configures it, must read
 * the same bytes as one whole answer with the same status, the same first
 * Content-Type, Retry-After and X-Queen-Owner (trimmed as peer_client trims
 * them) and body, keep the connection alive or not as llhttp does, and leave
 * peer_client nothing to refuse (its header bytes and body within their
 * bounds). A plain reading that differs from llhttp's would let an owner's
 * answer mean one thing on the fast path and another on the slow one. The
 * rest of the input is a pipeline of answers on one connection, each compared
 * twice: with a parser reset before each answer (as peer_client resets per
 * request) and with one resumed after the answer before. The first two bytes
 * choose the bounds. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "llhttp.h"
#include "peer_answer.h"

typedef struct {
  const char *base;
  size_t max_head, max_body;
  ephd_head_span_t field, value, body;
  int in_value;
  size_t head_bytes; /* what peer_client counts against its bound */
  ephd_head_span_t content_type, retry_after, owner;
  int failed, complete, keep_alive, status;
} reading_t;

static void extend(reading_t *r, ephd_head_span_t *s, const char *at,
                   size_t len) {
  if (s->len == 0) s->off = (size_t)(at - r->base);
  s->len += len;
}

static int count(reading_t *r, size_t len) {
  r->head_bytes += len;
  if (r->head_bytes <= r->max_head) return 0;
  r->failed = 1;
  return HPE_USER;
}

static int on_begin(llhttp_t *p) {
  reading_t *r = p->data;
  ephd_head_span_t none = {0, 0};
  r->field = r->value = r->body = none;
  r->content_type = r->retry_after = r->owner = none;
  r->in_value = 0;
  r->complete = 0;
  return 0;
}

static int on_status(llhttp_t *p, const char *at, size_t len) {
  (void)at;
  return count(p->data, len);
}

static int on_field(llhttp_t *p, const char *at, size_t len) {
  reading_t *r = p->data;
  if (r->in_value) {
    r->field.len = r->value.len = 0;
    r->in_value = 0;
  }
  extend(r, &r->field, at, len);
  return count(r, len);
}

static int on_value(llhttp_t *p, const char *at, size_t len) {
  reading_t *r = p->data;
  r->in_value = 1;
  extend(r, &r->value, at, len);
  return count(r, len);
}

/* As peer_client's on_header_value_complete: the first non-empty value. */
static int on_value_complete(llhttp_t *p) {
  reading_t *r = p->data;
  const char *f = r->base + r->field.off;
  ephd_head_span_t v = r->in_value ? r->value : (ephd_head_span_t){0, 0};
  v.len = ephd_head_trimmed(r->base + v.off, v.len);
  ephd_head_span_t *h = NULL;
  if (r->field.len == 12 && strncasecmp(f, "content-type", 12) == 0)
    h = &r->content_type;
  else if (r->field.len == 11 && strncasecmp(f, "retry-after", 11) == 0)
    h = &r->retry_after;
  else if (r->field.len == 13 && strncasecmp(f, "x-queen-owner", 13) == 0)
    h = &r->owner;
  if (h && h->len == 0) *h = v;
  r->field.len = r->value.len = 0;
  r->in_value = 0;
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  reading_t *r = p->data;
  if (p->status_code == 101 ||
      ((p->flags & F_CONTENT_LENGTH) && p->content_length > r->max_body)) {
    r->failed = 1;
    return -1;
  }
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  reading_t *r = p->data;
  if (r->body.len + len > r->max_body) {
    r->failed = 1;
    return HPE_USER;
  }
  extend(r, &r->body, at, len);
  return 0;
}

static int on_complete(llhttp_t *p) {
  reading_t *r = p->data;
  if (p->status_code < 200) return 0; /* the real answer follows */
  r->complete = 1;
  r->status = p->status_code;
  r->keep_alive = llhttp_should_keep_alive(p);
  return HPE_PAUSED;
}

static int same(ephd_head_span_t a, ephd_head_span_t b) {
  return a.len == b.len && (a.len == 0 || a.off == b.off);
}

/* llhttp's reading of the answer at buf (len bytes there) into r: how many
 * bytes it took for one whole answer, or 0 where peer_client would fail. */
static size_t read_llhttp(llhttp_t *parser, reading_t *r, const char *buf,
                          size_t len, size_t max_head, size_t max_body) {
  memset(r, 0, sizeof(*r));
  r->base = buf;
  r->max_head = max_head;
  r->max_body = max_body;
  parser->data = r;
  llhttp_errno_t err = llhttp_execute(parser, buf, len);
  if (err != HPE_PAUSED || !r->complete || r->failed) return 0;
  return (size_t)(llhttp_get_error_pos(parser) - buf);
}

/* The plain reading of n bytes at buf against llhttp's, llhttp standing
 * where the answers before left it. */
static void compare(llhttp_t *parser, const char *buf, size_t len, size_t n,
                    const ephd_answer_t *a, size_t max_head, size_t max_body) {
  if (n > len) abort();
  reading_t r;
  if (read_llhttp(parser, &r, buf, len, max_head, max_body) != n) abort();
  if (r.status != a->status || r.keep_alive != a->keep_alive) abort();
  if (parser->http_major != 1 || parser->http_minor != 1) abort();
  if ((parser->flags & (F_CHUNKED | F_UPGRADE)) || parser->upgrade) abort();
  if (!same(a->content_type, r.content_type) ||
      !same(a->retry_after, r.retry_after) || !same(a->owner, r.owner))
    abort();
  if (!same(a->body, r.body)) abort();
  if (a->body.off + a->body.len != n) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t max_head = 16 + (size_t)data[0] * 4, max_body = data[1];
  const char *buf = (const char *)data + 2;
  size_t len = size - 2, pos = 0;

  llhttp_settings_t settings;
  llhttp_settings_init(&settings);
  settings.on_message_begin = on_begin;
  settings.on_status = on_status;
  settings.on_header_field = on_field;
  settings.on_header_value = on_value;
  settings.on_header_value_complete = on_value_complete;
  settings.on_headers_complete = on_headers_complete;
  settings.on_body = on_body;
  settings.on_message_complete = on_complete;
  llhttp_t reset, resumed;
  llhttp_init(&reset, HTTP_RESPONSE, &settings);
  llhttp_init(&resumed, HTTP_RESPONSE, &settings);
  while (pos < len) {
    ephd_answer_t a;
    size_t n =
        ephd_answer_read_plain(buf + pos, len - pos, max_head, max_body, &a);
    llhttp_reset(&reset);
    if (n) {
      compare(&reset, buf + pos, len - pos, n, &a, max_head, max_body);
      compare(&resumed, buf + pos, len - pos, n, &a, max_head, max_body);
      if (!a.keep_alive) return 0;
    } else {
      /* Not plain: llhttp reads it, as in the relay, and the pipeline goes
       * on where it stopped while both parsers agree it is whole. */
      reading_t r;
      n = read_llhttp(&reset, &r, buf + pos, len - pos, max_head, max_body);
      if (n == 0 || !r.keep_alive) return 0;
      if (read_llhttp(&resumed, &r, buf + pos, len - pos, max_head, max_body) !=
          n)
        return 0;
    }
    llhttp_resume(&resumed);
    pos += n;
  }
  return 0;
}
