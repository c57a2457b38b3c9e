#include "json.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ffi.h"
#include "utf8.h"

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int hex4(const char *p, const char *end, unsigned *out) {
  if (end - p < 4) return -1;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(p[i]);
    if (h < 0) return -1;
    v = v << 4 | (unsigned)h;
  }
  *out = v;
  return 0;
}

static void put_utf8(ephd_buf_t *out, unsigned cp) {
  char tmp[4];
  size_t n;
  if (cp < 0x80) {
    tmp[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    tmp[0] = (char)(0xC0 | cp >> 6);
    tmp[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    tmp[0] = (char)(0xE0 | cp >> 12);
    tmp[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    tmp[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    tmp[0] = (char)(0xF0 | cp >> 18);
    tmp[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    tmp[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    tmp[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  ephd_buf_append(out, tmp, n);
}

/* The end of a run of plain string bytes: the first quote, backslash or
 * control byte, or the first byte >= 0x80 that does not begin a strict
 * UTF-8 sequence. A batched push spends most of its time here, walking
 * payload strings, so on x86-64 it tests sixteen bytes a step (SSE2 is
 * part of the architecture) and a block of plain ASCII needs no UTF-8
 * check. A byte >= 0x80 leaves the blocks for the characters that follow
 * one another from it, then the blocks go on; the byte loop finishes the
 * tail and serves other machines. */
static const char *plain_run(const char *p, const char *end) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
  const __m128i unit_sep = _mm_set1_epi8(0x1f);
#endif
  for (;;) {
#if defined(__SSE2__)
    while (end - p >= 16) {
      __m128i v = _mm_loadu_si128((const __m128i *)p);
      /* Signed, the bytes above 0x1f are 0x20..0x7f: neither a control
       * (0x00..0x1f) nor a byte >= 0x80, so one compare excludes both. */
      __m128i plain = _mm_andnot_si128(
          _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
          _mm_cmpgt_epi8(v, unit_sep));
      int mask = _mm_movemask_epi8(plain) ^ 0xffff;
      if (mask) {
        p += __builtin_ctz((unsigned)mask);
        break;
      }
      p += 16;
    }
#endif
    while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20 &&
           (unsigned char)*p < 0x80)
      p++;
    if (p >= end || (unsigned char)*p < 0x80) return p;
    do {
      size_t n = ephd_utf8_sequence(p, end);
      if (n == 0) return p; /* not UTF-8: the string is refused here */
      p += n;
    } while (p < end && (unsigned char)*p >= 0x80);
  }
}

/* One walker for both skipping and decoding, so the two can never disagree on
 * what a valid string is. out == NULL only validates. */
static const char *string_walk(const char *p, const char *end,
                               ephd_buf_t *out) {
  if (p >= end || *p != '"') return NULL;
  p++;
  for (;;) {
    const char *run = p;
    p = plain_run(p, end);
    if (out) ephd_buf_append(out, run, (size_t)(p - run));
    /* The run stopped at a quote, a backslash, or a byte no string may
     * hold raw: a control byte, or one that is not UTF-8. */
    if (p >= end) return NULL;
    if (*p == '"') return p + 1;
    if (*p != '\\') return NULL;
    p++;
    if (p >= end) return NULL;
    char c = *p++;
    char lit;
    switch (c) {
      case '"':
        lit = '"';
        break;
      case '\\':
        lit = '\\';
        break;
      case '/':
        lit = '/';
        break;
      case 'b':
        lit = '\b';
        break;
      case 'f':
        lit = '\f';
        break;
      case 'n':
        lit = '\n';
        break;
      case 'r':
        lit = '\r';
        break;
      case 't':
        lit = '\t';
        break;
      case 'u': {
        unsigned cp;
        if (hex4(p, end, &cp) < 0) return NULL;
        p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          unsigned lo;
          if (end - p < 6 || p[0] != '\\' || p[1] != 'u' ||
              hex4(p + 2, end, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
            return NULL;
          p += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          return NULL;
        }
        if (out) put_utf8(out, cp);
        continue;
      }
      default:
        return NULL;
    }
    if (out) ephd_buf_append(out, &lit, 1);
  }
}

const char *ephd_json_string(const char *p, const char *end, ephd_buf_t *out) {
  return string_walk(p, end, out);
}

int ephd_json_member(const char **p, const char *end, ephd_buf_t *scratch,
                     ephd_slice_t *key, int *first) {
  const char *s = ephd_json_ws(*p, end);
  if (s < end && *s == '}') {
    *p = s + 1;
    return 0;
  }
  if (!*first) {
    if (s >= end || *s != ',') return -1;
    s = ephd_json_ws(s + 1, end);
  }
  *first = 0;
  if (s >= end || *s != '"') return -1;
  /* Nearly every key is plain: it is read where it lies, and only one
   * with an escape is decoded, into scratch. */
  const char *run = plain_run(s + 1, end);
  if (run < end && *run == '"') {
    key->ptr = s + 1;
    key->len = (size_t)(run - s - 1);
    s = run + 1;
  } else {
    scratch->len = 0;
    s = ephd_json_string(s, end, scratch);
    if (s == NULL) return -1;
    key->ptr = scratch->len ? scratch->base : "";
    key->len = scratch->len;
  }
  s = ephd_json_ws(s, end);
  if (s >= end || *s != ':') return -1;
  *p = ephd_json_ws(s + 1, end);
  return 1;
}

/* Walks a JSON object's members, keeping the last one named name (when
 * name is not NULL) in value; returns how many members it has, or -1. */
static int walk_object(const char *json, size_t len, const char *name,
                       ephd_slice_t *value, int *found) {
  const char *p = ephd_json_ws(json, json + len), *end = json + len;
  if (p >= end || *p != '{') return -1;
  p++;
  ephd_buf_t scratch;
  ephd_buf_init(&scratch);
  ephd_slice_t key;
  size_t name_len = name ? strlen(name) : 0;
  int first = 1, r, members = 0;
  while ((r = ephd_json_member(&p, end, &scratch, &key, &first)) == 1) {
    const char *v = p;
    p = ephd_json_skip(p, end);
    if (p == NULL) {
      r = -1;
      break;
    }
    members++;
    if (name && key.len == name_len && memcmp(key.ptr, name, name_len) == 0) {
      value->ptr = v;
      value->len = (size_t)(p - v);
      *found = 1;
    }
  }
  ephd_buf_free(&scratch);
  return r < 0 ? -1 : members;
}

int ephd_ffi_json_field(const char *json, size_t len, const char *name,
                        ephd_slice_t *value) {
  int found = 0;
  if (walk_object(json, len, name, value, &found) < 0)
    return EPHD_E_BAD_REQUEST;
  return found ? EPHD_OK : EPHD_E_NOT_FOUND;
}

int ephd_ffi_json_members(const char *json, size_t len) {
  int members = walk_object(json, len, NULL, NULL, NULL);
  return members < 0 ? EPHD_E_BAD_REQUEST : members;
}

static const char *number(const char *p, const char *end) {
  if (p < end && *p == '-') p++;
  if (p >= end) return NULL;
  if (*p == '0') {
    p++;
  } else if (*p >= '1' && *p <= '9') {
    while (p < end && *p >= '0' && *p <= '9') p++;
  } else {
    return NULL;
  }
  if (p < end && *p == '.') {
    p++;
    if (p >= end || *p < '0' || *p > '9') return NULL;
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end || *p < '0' || *p > '9') return NULL;
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  return p;
}

static const char *literal(const char *p, const char *end, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(end - p) < n || memcmp(p, lit, n) != 0) return NULL;
  return p + n;
}

/* Whether a token that failed to read (a string, literal or number at p)
 * failed only because the body ended inside it: more bytes could complete
 * it. A body cut short mid-payload is the common truncation, and its 400
 * should say so rather than point at where the payload began. Only the
 * failure path runs this; a byte of 0x80 and up counts as a character's,
 * and a cut character is cut short. */
static int one_of(const char *set, char c) {
  return c != '\0' && strchr(set, c) != NULL;
}

static int cut_short(const char *p, const char *end) {
  if (p >= end) return 1; /* cut where a token would start */
  if (*p == '"') {
    for (p++; p < end; p++) {
      unsigned char c = (unsigned char)*p;
      if (c == '"' || c < 0x20) return 0;
      if (c != '\\') continue;
      if (++p >= end) return 1;
      if (*p != 'u') {
        if (!one_of("\"\\/bfnrt", *p)) return 0;
        continue;
      }
      for (int i = 0; i < 4; i++) {
        if (++p >= end) return 1;
        if (!isxdigit((unsigned char)*p)) return 0;
      }
    }
    return 1;
  }
  const char *lit = *p == 't'   ? "true"
                    : *p == 'f' ? "false"
                    : *p == 'n' ? "null"
                                : NULL;
  if (lit)
    return (size_t)(end - p) < strlen(lit) &&
           memcmp(p, lit, (size_t)(end - p)) == 0;
  for (; p < end; p++)
    if (!one_of("0123456789+-.eE", *p)) return 0;
  return 1;
}

/* *at, when at is not NULL, is where a value that is not JSON stops being
 * read: the token that cannot be read, or end when the value is cut short
 * (between tokens or inside one). The hot path passes NULL, and pays only
 * on failure. */
#define BROKEN(where)            \
  do {                           \
    if (at != NULL) *at = where; \
    return NULL;                 \
  } while (0)
#define BROKEN_TOKEN(token) BROKEN(cut_short(token, end) ? end : token)

/* Iterative, with an explicit stack of container kinds, so nesting depth costs
 * bytes rather than C stack frames. */
static inline const char *skip(const char *p, const char *end,
                               const char **at) {
  char stack[EPHD_JSON_MAX_DEPTH];
  int depth = 0;
  for (;;) {
    /* Expect a value. */
    p = ephd_json_ws(p, end);
    if (p >= end) BROKEN(end);
    const char *token = p;
    switch (*p) {
      case '{':
      case '[':
        if (depth == EPHD_JSON_MAX_DEPTH) BROKEN(p);
        stack[depth++] = *p;
        p = ephd_json_ws(p + 1, end);
        if (p < end && *p == (stack[depth - 1] == '{' ? '}' : ']')) {
          depth--;
          p++;
          break;
        }
        if (stack[depth - 1] == '{') {
          token = p;
          p = string_walk(p, end, NULL);
          if (p == NULL) BROKEN_TOKEN(token);
          p = ephd_json_ws(p, end);
          if (p >= end || *p != ':') BROKEN(p);
          p++;
        }
        continue;
      case '"':
        p = string_walk(p, end, NULL);
        break;
      case 't':
        p = literal(p, end, "true");
        break;
      case 'f':
        p = literal(p, end, "false");
        break;
      case 'n':
        p = literal(p, end, "null");
        break;
      default:
        p = number(p, end);
        break;
    }
    if (p == NULL) BROKEN_TOKEN(token);
    /* After a value: close containers or move to the next element. */
    for (;;) {
      if (depth == 0) return p;
      p = ephd_json_ws(p, end);
      if (p >= end) BROKEN(end);
      char close = stack[depth - 1] == '{' ? '}' : ']';
      if (*p == close) {
        depth--;
        p++;
        continue;
      }
      if (*p != ',') BROKEN(p);
      p++;
      if (stack[depth - 1] == '{') {
        token = p = ephd_json_ws(p, end);
        p = string_walk(p, end, NULL);
        if (p == NULL) BROKEN_TOKEN(token);
        p = ephd_json_ws(p, end);
        if (p >= end || *p != ':') BROKEN(p);
        p++;
      }
      break;
    }
  }
}

#undef BROKEN_TOKEN
#undef BROKEN

const char *ephd_json_skip(const char *p, const char *end) {
  return skip(p, end, NULL);
}

const char *ephd_json_broken(const char *p, const char *end) {
  const char *at = end;
  const char *after = skip(p, end, &at);
  if (after == NULL) return at;
  after = ephd_json_ws(after, end);
  return after == end ? NULL : after;
}

/* Whether any of w's eight bytes is a control, a quote or a backslash:
 * "has a byte less than n" and "has a zero byte" (after xor), exact as a
 * yes or no. Bytes of 0x80 and up are never flagged. */
static inline uint64_t escapes8(uint64_t w) {
  const uint64_t ones = 0x0101010101010101ull, highs = ones << 7;
  uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
  return (((w - ones * 0x20) & ~w) | ((quote - ones) & ~quote) |
          ((backslash - ones) & ~backslash)) &
         highs;
}

/* Eight bytes a step over the plain runs: ids and names, written for
 * every message a pop delivers and every id an ack settles, are all
 * plain. */
void ephd_json_write_escaped(ephd_buf_t *b, const char *s, size_t len) {
  static const char hex[] = "0123456789abcdef";
  size_t run = 0, i = 0;
  while (i < len) {
    if (len - i >= 8) {
      uint64_t w;
      memcpy(&w, s + i, sizeof(w));
      if (!escapes8(w)) {
        i += 8;
        continue;
      }
    }
    unsigned char c = (unsigned char)s[i++];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    ephd_buf_append(b, s + run, i - 1 - run);
    run = i;
    char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
    if (c == '"' || c == '\\') {
      esc[1] = (char)c;
      ephd_buf_append(b, esc, 2);
    } else if (c == '\n') {
      ephd_buf_append(b, "\\n", 2);
    } else if (c == '\t') {
      ephd_buf_append(b, "\\t", 2);
    } else if (c == '\r') {
      ephd_buf_append(b, "\\r", 2);
    } else {
      ephd_buf_append(b, esc, 6);
    }
  }
  ephd_buf_append(b, s + run, len - run);
}

void ephd_json_write_string(ephd_buf_t *b, const char *s, size_t len) {
  ephd_buf_append(b, "\"", 1);
  ephd_json_write_escaped(b, s, len);
  ephd_buf_append(b, "\"", 1);
}
