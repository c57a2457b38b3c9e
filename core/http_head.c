/* Nearly every request a client library sends is the same plain shape: a
 * request line, a few headers, a Content-Length body. llhttp reads any
 * request byte by byte through callbacks, which cost a push more than
 * Redis spends on a whole LPUSH; this reads the plain shape alone, in one
 * pass, and gives everything else to llhttp untouched. It only ever says
 * yes to a message llhttp would read the same way (fuzz/fuzz_plain.c holds
 * it to that), so what is not plain costs nothing but the look. */
#include "http_head.h"

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

const char *const ephd_head_names[EPHD_N_HEADERS] = {
    "x-queen-tenant", "Authorization",  "Content-Type",    "Origin",
    "Host",           "Sec-Fetch-Site", "X-Queen-Forward", "X-Queen-Session",
    "X-Queen-Scan"};

/* Case-insensitive by one bit: the names are letters and '-', and of the
 * token bytes (and of the printable ones in a value) only those fold onto
 * them. A word at a time, because every header of every request is looked
 * up here. */
static uint64_t folded8(const char *p) {
  uint64_t w;
  memcpy(&w, p, sizeof(w));
  return w | 0x2020202020202020ull;
}

static uint32_t folded4(const char *p) {
  uint32_t w;
  memcpy(&w, p, sizeof(w));
  return w | 0x20202020u;
}

/* Whether f spells `name`, in any case (both are folded), both len bytes (4 to
 * 24): whole words, the last one overlapping the one before when len is not a
 * multiple of the word. */
static inline __attribute__((always_inline)) int same_name(const char *f,
                                                           const char *name,
                                                           size_t len) {
  if (len < 8)
    return folded4(f) == folded4(name) &&
           folded4(f + len - 4) == folded4(name + len - 4);
  for (size_t i = 0; i + 8 < len; i += 8)
    if (folded8(f + i) != folded8(name + i)) return 0;
  return folded8(f + len - 8) == folded8(name + len - 8);
}

int ephd_head_same_name(const char *f, const char *name, size_t len) {
  return same_name(f, name, len);
}

/* By length first, since most fields are none of them. */
int ephd_head_header_of(const char *f, size_t len) {
  int h = -1;
  switch (len) {
    case 4:
      h = EPHD_HDR_HOST;
      break;
    case 6:
      h = EPHD_HDR_ORIGIN;
      break;
    case 12: /* Content-Type, X-Queen-Scan */
      h = (f[0] | 0x20) == 'x' ? EPHD_HDR_SCAN : EPHD_HDR_CONTENT_TYPE;
      break;
    case 13:
      h = EPHD_HDR_AUTHORIZATION;
      break;
    case 14:
      h = (f[0] | 0x20) == 'x' ? EPHD_HDR_TENANT : EPHD_HDR_FETCH_SITE;
      break;
    case 15: /* X-Queen-Forward, X-Queen-Session */
      h = (f[8] | 0x20) == 'f' ? EPHD_HDR_FORWARD : EPHD_HDR_SESSION;
      break;
  }
  return h >= 0 && same_name(f, ephd_head_names[h], len) ? h : -1;
}

/* The headers that frame the message or the connection, which llhttp
 * reads. Of them a plain request has Content-Length, once, and
 * "Connection: keep-alive", which changes nothing in HTTP/1.1, or
 * "Connection: close", which urllib sends with every request: llhttp
 * then says not to keep the connection (llhttp_should_keep_alive), and
 * so does the plain reading. */
enum { F_OTHER, F_LENGTH, F_CONNECTION, F_NOT_PLAIN };

/* By length, as no two of them share one. */
static const struct {
  const char *name;
  int kind;
} framing_by_len[18] = {
    [6] = {"expect", F_NOT_PLAIN},
    [7] = {"upgrade", F_NOT_PLAIN},
    [10] = {"connection", F_CONNECTION},
    [14] = {"content-length", F_LENGTH},
    [16] = {"proxy-connection", F_NOT_PLAIN},
    [17] = {"transfer-encoding", F_NOT_PLAIN},
};

static int framing_of(const char *f, size_t len) {
  if (len >= 18 || framing_by_len[len].name == NULL) return F_OTHER;
  return same_name(f, framing_by_len[len].name, len) ? framing_by_len[len].kind
                                                     : F_OTHER;
}

/* What a byte may be in a plain request: never wider than llhttp takes
 * it (fuzz_plain checks), narrower where that is simpler. A target is
 * printable ASCII but '#' (a fragment is not plain), a field name a token
 * (RFC 9110 5.6.2), a value printable ASCII, space and tab (obs-text is
 * not plain). */
static const unsigned char is_token[256] = {
    ['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1, ['!'] = 1,
    ['#'] = 1,         ['$'] = 1,         ['%'] = 1,         ['&'] = 1,
    ['\''] = 1,        ['*'] = 1,         ['+'] = 1,         ['-'] = 1,
    ['.'] = 1,         ['^'] = 1,         ['_'] = 1,         ['`'] = 1,
    ['|'] = 1,         ['~'] = 1,
};

static int printable_above(unsigned char b, unsigned char low,
                           unsigned char stop) {
  return b > low && b < 0x7f && b != stop;
}

/* The first byte from p that is not printable ASCII above `low` (0x20:
 * space stops the run; 0x1f: it does not), or is `stop`. Every request
 * spends most of its reading here, so on x86-64 sixteen bytes a step
 * (SSE2 is part of the architecture); the byte loop finishes the tail and
 * serves other machines. */
static const unsigned char *printable_run(const unsigned char *p,
                                          const unsigned char *end,
                                          unsigned char low,
                                          unsigned char stop) {
#if defined(__SSE2__)
  /* Signed, the bytes above low are low+1..0x7f: neither a control nor a
   * byte >= 0x80, so one compare excludes both. */
  const __m128i above = _mm_set1_epi8((char)low), del = _mm_set1_epi8(0x7f),
                stopper = _mm_set1_epi8((char)stop);
  while (end - p >= 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i plain = _mm_andnot_si128(
        _mm_or_si128(_mm_cmpeq_epi8(v, del), _mm_cmpeq_epi8(v, stopper)),
        _mm_cmpgt_epi8(v, above));
    int mask = _mm_movemask_epi8(plain) ^ 0xffff;
    if (mask) return p + __builtin_ctz((unsigned)mask);
    p += 16;
  }
#endif
  while (p < end && printable_above(*p, low, stop)) p++;
  return p;
}

int ephd_head_token(const unsigned char *p, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!is_token[p[i]]) return 0;
  return 1;
}

static int is_ows(unsigned char b) { return b == ' ' || b == '\t'; }

static const unsigned char *text_end(const unsigned char *p,
                                     const unsigned char *end) {
  /* A tab stops the run, and the byte loop goes on past it. */
  p = printable_run(p, end, 0x1f, 0x7f);
  while (p < end && (*p == '\t' || printable_above(*p, 0x1f, 0x7f))) p++;
  return p;
}

/* Inlined into the request's reader, every request's hottest loop (called,
 * it cost a direct push 90 instructions); the answer's reader calls it. */
static inline __attribute__((always_inline)) const unsigned char *read_line(
    const unsigned char *p, const unsigned char *end, ephd_head_line_t *l) {
  l->name = p;
  p = printable_run(p, end, ' ', ':');
  if (p == l->name || p == end || *p != ':') return NULL;
  l->name_len = (size_t)(p - l->name);
  p++;
  while (p < end && is_ows(*p)) p++;
  l->value = p;
  p = text_end(p, end);
  if (end - p < 2 || p[0] != '\r' || p[1] != '\n') return NULL;
  l->value_end = l->value + ephd_head_trimmed((const char *)l->value,
                                              (size_t)(p - l->value));
  l->bare = l->value_end == p;
  return p + 2;
}

const unsigned char *ephd_head_text_end(const unsigned char *p,
                                        const unsigned char *end) {
  return text_end(p, end);
}

const unsigned char *ephd_head_line(const unsigned char *p,
                                    const unsigned char *end,
                                    ephd_head_line_t *l) {
  return read_line(p, end, l);
}

int ephd_head_length(const unsigned char *v, const unsigned char *ve,
                     size_t max_body, size_t *out) {
  if (ve == v || ve - v > 9) return 0;
  size_t n = 0;
  for (; v < ve; v++) {
    if ((unsigned)(*v - '0') > 9u) return 0;
    n = n * 10 + (size_t)(*v - '0');
  }
  *out = n;
  return n <= max_body;
}

typedef struct {
  const char *line; /* "GET /" and the like: the method, a space, a '/' */
  size_t len;
  const char *name;
} method_t;

static const method_t methods[] = {
    {"GET /", 5, "GET"},
    {"POST /", 6, "POST"},
    {"PUT /", 5, "PUT"},
    {"DELETE /", 8, "DELETE"},
};

static const unsigned char *method_of(const unsigned char *p,
                                      const unsigned char *end,
                                      ephd_plain_t *m) {
  for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
    const method_t *t = &methods[i];
    if ((size_t)(end - p) > t->len && memcmp(p, t->line, t->len) == 0) {
      m->method = t->name;
      return p + t->len - 1; /* at the target's '/' */
    }
  }
  return NULL;
}

static ephd_head_span_t span(const unsigned char *base,
                             const unsigned char *from,
                             const unsigned char *to) {
  ephd_head_span_t s = {(size_t)(from - base), (size_t)(to - from)};
  return s;
}

size_t ephd_head_read_plain(const char *buf, size_t len, size_t max_head,
                            size_t max_body, ephd_plain_t *m) {
  const unsigned char *base = (const unsigned char *)buf;
  const unsigned char *end = base + ephd_head_room(0, len, max_head);
  const unsigned char *p = method_of(base, end, m);
  if (p == NULL) return 0;
  const unsigned char *target = p;
  p = printable_run(p, end, ' ', '#');
  m->url = span(base, target, p);
  static const char version[] = " HTTP/1.1\r\n";
  if ((size_t)(end - p) < sizeof(version) - 1 ||
      memcmp(p, version, sizeof(version) - 1) != 0)
    return 0;
  p += sizeof(version) - 1;
  m->seen = 0;
  m->keep_alive = 1;
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
    if ((p = read_line(p, end, &l)) == NULL) return 0;
    const unsigned char *field = l.name, *value = l.value;
    const unsigned char *value_end = l.value_end;
    size_t field_len = l.name_len;
    int h = ephd_head_header_of((const char *)field, field_len);
    if (h >= 0) {
      /* Twice is refused, on llhttp's path. */
      if (m->seen & (1u << h)) return 0;
      m->seen |= 1u << h;
      m->headers[h] = span(base, value, value_end);
      continue;
    }
    int framing = framing_of((const char *)field, field_len);
    /* A name that is none of those is checked whole: printable is not
     * yet a token. (One that is spells a token: of the printable bytes
     * only letters fold onto letters, and '-' onto '-'.) */
    if (framing == F_OTHER && !ephd_head_token(field, field_len)) return 0;
    switch (framing) {
      case F_LENGTH: /* llhttp takes no tab after the digits */
        if (has_length || !l.bare ||
            !ephd_head_length(value, value_end, max_body, &body_len))
          return 0;
        has_length = 1;
        break;
      case F_CONNECTION: /* llhttp takes no tab after "close" */
        if (value_end - value == 5 && l.bare &&
            same_name((const char *)value, "close", 5))
          m->keep_alive = 0;
        else if (value_end - value != 10 ||
                 !same_name((const char *)value, "keep-alive", 10))
          return 0;
        break;
      case F_NOT_PLAIN:
        return 0;
    }
  }
  size_t head = (size_t)(p - base);
  if (len - head < body_len) return 0;
  m->body = span(base, p, p + body_len);
  return head + body_len;
}
