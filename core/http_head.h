/* A request's head as the transport reads it: the headers the broker reads,
 * and the plain request, read whole without llhttp. */
#ifndef EPHD_HTTP_HEAD_H
#define EPHD_HTTP_HEAD_H

#include <stddef.h>

/* Bytes of a message, from where it begins. */
typedef struct {
  size_t off, len;
} ephd_head_span_t;

/* The request headers the broker reads, each at most once per request. */
enum {
  EPHD_HDR_TENANT,
  EPHD_HDR_AUTHORIZATION,
  EPHD_HDR_CONTENT_TYPE,
  EPHD_HDR_ORIGIN,
  EPHD_HDR_HOST,
  EPHD_HDR_FETCH_SITE,
  EPHD_HDR_FORWARD,
  EPHD_HDR_SESSION,
  EPHD_HDR_SCAN, /* X-Queen-Scan: a relayed push's frame (core/scan.h) */
  EPHD_N_HEADERS
};

extern const char *const ephd_head_names[EPHD_N_HEADERS];

/* A header value's length without its trailing spaces and tabs: the
 * value both readers hand on (the leading ones are never part of it). */
static inline size_t ephd_head_trimmed(const char *v, size_t len) {
  while (len && (v[len - 1] == ' ' || v[len - 1] == '\t')) len--;
  return len;
}

/* A head is bounded by its raw bytes, whatever a reader makes of them:
 * every byte from the first after the message before (blank lines between
 * pipelined requests included) through the blank line that ends it, the
 * whitespace llhttp skips (after the method, before a value) and all, which
 * one connection could otherwise stream into the broker's memory until the
 * header timeout. Of `avail` bytes that follow a head's first `taken`, how
 * many a reader may take as head: both readers take no more, so a head not
 * ended when none is left is over `max` (431) however it arrived. */
static inline size_t ephd_head_room(size_t taken, size_t avail, size_t max) {
  size_t left = taken < max ? max - taken : 0;
  return avail < left ? avail : left;
}

/* Both plain readers' pieces (the request's here, the relay's answer's in
 * core/cell/peer_answer.c), each byte rule never wider than llhttp's.
 *
 * Whether f spells `name`, in any case (both are folded), both len bytes (4 to
 * 24): of the token bytes (and of the printable ones in a value) only letters
 * fold onto letters by the 0x20 bit, and '-' onto '-', so a name that does
 * is a token. */
int ephd_head_same_name(const char *f, const char *name, size_t len);

/* Whether every byte is a token's (RFC 9110 5.6.2). */
int ephd_head_token(const unsigned char *p, size_t len);

/* A Content-Length within max_body: digits only, nine at most, so no
 * overflow on any machine. */
int ephd_head_length(const unsigned char *v, const unsigned char *ve,
                     size_t max_body, size_t *out);

/* The first byte from p that is not printable ASCII, a space or a tab: how
 * far a header value (or a reason phrase) may run. */
const unsigned char *ephd_head_text_end(const unsigned char *p,
                                        const unsigned char *end);

/* A header line: a name of printable bytes right before its colon (a token
 * only if checked: ephd_head_token, or a known name that ephd_head_same_name
 * matched), spaces and tabs, a value ephd_head_text_end allows, CRLF. */
typedef struct {
  const unsigned char *name, *value, *value_end; /* value_end: trimmed */
  size_t name_len;
  int bare; /* nothing trimmed: the value ends right at its CR */
} ephd_head_line_t;

/* Reads the line at p into l; returns the byte after its CRLF, or NULL
 * when it is not such a line or not all before end. */
const unsigned char *ephd_head_line(const unsigned char *p,
                                    const unsigned char *end,
                                    ephd_head_line_t *l);

/* Which of the headers above a field name is (any case), or -1. */
int ephd_head_header_of(const char *name, size_t len);

typedef struct {
  const char *method; /* spelt as llhttp_method_name spells it */
  ephd_head_span_t url, body;
  ephd_head_span_t headers[EPHD_N_HEADERS]; /* those seen; values trimmed */
  unsigned seen;                            /* a bit per EPHD_HDR_ */
  int keep_alive; /* 0 when the client said "Connection: close" */
} ephd_plain_t;

/* Reads the message at buf when it is plain and whole: GET, POST, PUT or
 * DELETE of an origin-form target, HTTP/1.1, token field names right
 * before their colon, printable ASCII values, at most one Content-Length
 * (within max_body) and no other framing or connection header but
 * "Connection: keep-alive" or "close", the head within max_head raw bytes
 * (ephd_head_room) and the body all in buf. Returns the message's length, or 0
 * when it is anything else, which llhttp then reads from its first byte: the
 * broker answers every message exactly as it would have without this. */
size_t ephd_head_read_plain(const char *buf, size_t len, size_t max_head,
                            size_t max_body, ephd_plain_t *m);

#endif
