/* The plain request reader against llhttp: whenever http_head.c says a
 * message is plain, llhttp, configured as the transport configures it,
 * must read the same bytes as one whole message with the same method,
 * target, identity headers (values trimmed as the transport trims them)
 * and body, keep the connection alive or not as llhttp does, and leave the
 * transport nothing to refuse (no repeated identity header, no space before a
 * colon, no 100-continue, the head and body within their bounds). A plain
 * reading that differs from llhttp's would let one byte sequence mean two
 * requests. The rest of the input is a pipeline, so llhttp is compared
 * from whatever state the messages before left it in. The first two bytes
 * choose the bounds. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_head.h"
#include "llhttp.h"

typedef struct {
  const char *base;
  ephd_head_span_t url, field, value, body;
  int in_value;
  size_t head_bytes; /* what the transport counts against its bound */
  ephd_head_span_t headers[EPHD_N_HEADERS];
  unsigned seen;
  int expect, refused;
  int complete;
} reading_t;

static void extend(reading_t *r, ephd_head_span_t *s, const char *at,
                   size_t len) {
  if (s->len == 0) s->off = (size_t)(at - r->base);
  s->len += len;
}

static int on_url(llhttp_t *p, const char *at, size_t len) {
  reading_t *r = p->data;
  extend(r, &r->url, at, len);
  r->head_bytes += len;
  return 0;
}

static int on_field(llhttp_t *p, const char *at, size_t len) {
  reading_t *r = p->data;
  if (r->in_value) {
    r->field.len = r->value.len = 0;
    r->in_value = 0;
  }
  extend(r, &r->field, at, len);
  r->head_bytes += len;
  return 0;
}

static int on_value(llhttp_t *p, const char *at, size_t len) {
  reading_t *r = p->data;
  r->in_value = 1;
  extend(r, &r->value, at, len);
  r->head_bytes += len;
  return 0;
}

static int is_ows(char c) { return c == ' ' || c == '\t'; }

static int on_value_complete(llhttp_t *p) {
  reading_t *r = p->data;
  const char *f = r->base + r->field.off;
  ephd_head_span_t v = r->in_value ? r->value : (ephd_head_span_t){0, 0};
  v.len = ephd_head_trimmed(r->base + v.off, v.len);
  if (r->field.len && is_ows(f[r->field.len - 1])) r->refused = 1;
  int h = ephd_head_header_of(f, r->field.len);
  if (h >= 0) {
    if (r->seen & (1u << h)) r->refused = 1;
    r->seen |= 1u << h;
    r->headers[h] = v;
  } else if (r->field.len == 6 && strncasecmp(f, "expect", 6) == 0) {
    r->expect = 1;
  }
  r->field.len = r->value.len = 0;
  r->in_value = 0;
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  reading_t *r = p->data;
  extend(r, &r->body, at, len);
  return 0;
}

static int on_complete(llhttp_t *p) {
  ((reading_t *)p->data)->complete = 1;
  return HPE_PAUSED;
}

static int same(ephd_head_span_t a, ephd_head_span_t b) {
  return a.len == b.len && (a.len == 0 || a.off == b.off);
}

/* The plain reading of the message at buf (n bytes of the len there)
 * against llhttp's reading of the same bytes, llhttp standing where the
 * last message it read left it, as in the transport. */
static void compare(llhttp_t *parser, const char *buf, size_t len, size_t n,
                    const ephd_plain_t *m, size_t max_head, size_t max_body) {
  if (n > len) abort();
  reading_t r;
  memset(&r, 0, sizeof(r));
  r.base = buf;
  parser->data = &r;
  /* Given all the bytes, llhttp must stop exactly where the plain reader
   * said the message ends. */
  llhttp_errno_t err = llhttp_execute(parser, buf, len);
  if (err != HPE_PAUSED || !r.complete) abort();
  if (llhttp_get_error_pos(parser) != buf + n) abort();
  if (strcmp(m->method, llhttp_method_name(parser->method)) != 0) abort();
  if (parser->http_major != 1 || parser->http_minor != 1) abort();
  if (llhttp_should_keep_alive(parser) != m->keep_alive) abort();
  if (parser->flags & (F_CHUNKED | F_UPGRADE)) abort();
  if (parser->upgrade) abort();
  if (!same(m->url, r.url) || !same(m->body, r.body)) abort();
  /* Nothing the transport would have refused on the llhttp path. */
  if (r.refused || r.expect) abort();
  if (r.head_bytes > max_head || r.body.len > max_body) abort();
  if (m->seen != r.seen) abort();
  for (int h = 0; h < EPHD_N_HEADERS; h++)
    if ((m->seen & (1u << h)) && !same(m->headers[h], r.headers[h])) abort();
}

/* The bytes as a pipeline, read as the transport reads one: at each
 * message's start the plain reader first (never after an upgrade, which
 * the transport checks), llhttp where it says no; what the plain reader
 * takes is compared with llhttp's reading from the state the messages
 * before left it in (an upgrade before was how bytes after it were once
 * served). Stops where the transport would: an error, a message not all
 * there, a connection not kept. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t max_head = 16 + (size_t)data[0] * 4, max_body = data[1];
  const char *buf = (const char *)data + 2;
  size_t len = size - 2, pos = 0;

  llhttp_settings_t settings;
  llhttp_settings_init(&settings);
  settings.on_url = on_url;
  settings.on_header_field = on_field;
  settings.on_header_value = on_value;
  settings.on_header_value_complete = on_value_complete;
  settings.on_body = on_body;
  settings.on_message_complete = on_complete;
  llhttp_t parser;
  llhttp_init(&parser, HTTP_REQUEST, &settings);
  while (pos < len) {
    ephd_plain_t m;
    size_t n = parser.upgrade ? 0
                              : ephd_head_read_plain(buf + pos, len - pos,
                                                     max_head, max_body, &m);
    if (n) {
      compare(&parser, buf + pos, len - pos, n, &m, max_head, max_body);
      if (!m.keep_alive) return 0;
    } else {
      reading_t r;
      memset(&r, 0, sizeof(r));
      r.base = buf + pos;
      parser.data = &r;
      if (llhttp_execute(&parser, buf + pos, len - pos) != HPE_PAUSED) return 0;
      if (r.refused || !llhttp_should_keep_alive(&parser)) return 0;
      n = (size_t)(llhttp_get_error_pos(&parser) - (buf + pos));
    }
    llhttp_resume(&parser);
    pos += n;
  }
  return 0;
}
