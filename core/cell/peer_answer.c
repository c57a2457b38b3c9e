/* An owner's answer to a relayed request is nearly always the same plain
 * shape (core/http.c writes every one of them): a status line, Content-Type,
 * Content-Length, sometimes Retry-After or X-Queen-Owner, a body. Pipelined,
 * several arrive in one read, and llhttp's byte-at-a-time callbacks cost more
 * than the relay's own work on them; this reads the plain shape alone, in one
 * pass, and leaves everything else to llhttp from its first byte. It only ever
 * says yes to an answer llhttp, configured as peer_client configures it,
 * would read the same way (fuzz/fuzz_peer_answer.c holds it to that). */
#include "peer_answer.h"

#include <string.h>

/* The fields the relay reads or that frame the answer, by length, as no two
 * share one. Of the framing ones a plain answer has Content-Length, once,
 * and Connection "keep-alive" or "close"; the others (a chunked or upgraded
 * answer, or Proxy-Connection, which llhttp reads as Connection) are not
 * plain. */
enum {
  F_OTHER,
  F_CONTENT_TYPE,
  F_RETRY_AFTER,
  F_OWNER,
  F_LENGTH,
  F_CONNECTION,
  F_NOT_PLAIN
};

static const struct {
  const char *name; /* lower case */
  int kind;
} field_by_len[18] = {
    [7] = {"upgrade", F_NOT_PLAIN},
    [10] = {"connection", F_CONNECTION},
    [11] = {"retry-after", F_RETRY_AFTER},
    [12] = {"content-type", F_CONTENT_TYPE},
    [13] = {"x-queen-owner", F_OWNER},
    [14] = {"content-length", F_LENGTH},
    [16] = {"proxy-connection", F_NOT_PLAIN},
    [17] = {"transfer-encoding", F_NOT_PLAIN},
};

static int field_of(const unsigned char *f, size_t len) {
  if (len >= 18 || field_by_len[len].name == NULL) return F_OTHER;
  return ephd_head_same_name((const char *)f, field_by_len[len].name, len)
             ? field_by_len[len].kind
             : F_OTHER;
}

static ephd_head_span_t span(const unsigned char *base,
                             const unsigned char *from,
                             const unsigned char *to) {
  ephd_head_span_t s = {(size_t)(from - base), (size_t)(to - from)};
  return s;
}

/* The status, or 0 when it is not one a plain answer has: 1xx precede the
 * real answer (and 101 ends HTTP), and 204 and 304 have no body whatever
 * their Content-Length says. */
static int status_of(const unsigned char *p) {
  if (p[0] < '2' || p[0] > '5' || (unsigned)(p[1] - '0') > 9u ||
      (unsigned)(p[2] - '0') > 9u)
    return 0;
  int s = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
  return s == 204 || s == 304 ? 0 : s;
}

size_t ephd_answer_read_plain(const char *buf, size_t len, size_t max_head,
                              size_t max_body, ephd_answer_t *a) {
  const unsigned char *base = (const unsigned char *)buf;
  const unsigned char *end = base + ephd_head_room(0, len, max_head);
  const unsigned char *p = base;
  /* "HTTP/1.1 200 " */
  if (end - p < 13 || memcmp(p, "HTTP/1.1 ", 9) != 0 || p[12] != ' ') return 0;
  if ((a->status = status_of(p + 9)) == 0) return 0;
  p = ephd_head_text_end(p + 13, end);
  if (end - p < 2 || p[0] != '\r' || p[1] != '\n') return 0;
  p += 2;
  ephd_head_span_t none = {0, 0};
  a->content_type = a->retry_after = a->owner = none;
  a->keep_alive = 1;
  size_t body_len = 0;
  int has_length = 0;
  for (;;) {
    if (end - p < 2) return 0;
    if (p[0] == '\r') {
      if (p[1] != '\n') return 0;
      p += 2;
      break;
    }
    ephd_head_line_t l;
    if ((p = ephd_head_line(p, end, &l)) == NULL) return 0;
    const unsigned char *value = l.value, *value_end = l.value_end;
    int field = field_of(l.name, l.name_len);
    /* A name that is none of those is checked whole: printable is not yet
     * a token (one that is spells one: ephd_head_same_name). */
    if (field == F_OTHER && !ephd_head_token(l.name, l.name_len)) return 0;
    ephd_head_span_t *kept = NULL;
    switch (field) {
      case F_CONTENT_TYPE:
        kept = &a->content_type;
        break;
      case F_RETRY_AFTER:
        kept = &a->retry_after;
        break;
      case F_OWNER:
        kept = &a->owner;
        break;
      case F_LENGTH: /* llhttp takes no space or tab after the digits */
        if (has_length || !l.bare ||
            !ephd_head_length(value, value_end, max_body, &body_len))
          return 0;
        has_length = 1;
        break;
      case F_CONNECTION: /* llhttp takes no tab after "close" */
        if (value_end - value == 5 && l.bare &&
            ephd_head_same_name((const char *)value, "close", 5))
          a->keep_alive = 0;
        else if (value_end - value != 10 ||
                 !ephd_head_same_name((const char *)value, "keep-alive", 10))
          return 0;
        break;
      case F_NOT_PLAIN:
        return 0;
    }
    /* The first that is not empty, as peer_client keeps it. */
    if (kept && kept->len == 0) *kept = span(base, value, value_end);
  }
  /* Without a length an answer runs to the connection's end. */
  if (!has_length) return 0;
  size_t head = (size_t)(p - base);
  if (len - head < body_len) return 0;
  a->body = span(base, p, p + body_len);
  return head + body_len;
}
