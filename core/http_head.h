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
