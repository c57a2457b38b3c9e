/* Just enough JSON for the hot bodies: validate and skip a value without
 * building anything (payloads are kept as the client's exact bytes), decode a
 * string into a buffer (names, ids), and escape a string on the way out. */
#ifndef EPHD_JSON_H
#define EPHD_JSON_H

#include <stddef.h>

#include "buf.h"
#include "ffi.h"

/* Deeper nesting than this in a payload is refused, so a hostile body cannot
 * make the scanner's work unbounded in anything but its length. */
#define EPHD_JSON_MAX_DEPTH 512

/* Whitespace is skipped between every two tokens of every body, and is
 * nearly always absent: inline, so its absence costs one test. */
static inline const char *ephd_json_ws(const char *p, const char *end) {
  while (p < end && (unsigned char)*p <= ' ' &&
         (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
    p++;
  return p;
}
/* Returns the end of the value starting at p, or NULL if it is not JSON. */
const char *ephd_json_skip(const char *p, const char *end);
/* NULL when p..end is one JSON value (whitespace around it allowed); else
 * where reading it fails: the token that cannot be read, the first byte
 * after the value, or end when it is cut short. Slow path only. */
const char *ephd_json_broken(const char *p, const char *end);
/* Walks an object's members: *p starts after '{' and *first at 1. Returns 1
 * with the decoded key in key and *p at its value (which the caller must
 * consume), 0 at the closing '}', -1 when the object is broken. The key is
 * a slice of the input, or of scratch for a key with escapes: valid until
 * the next call. */
int ephd_json_member(const char **p, const char *end, ephd_buf_t *scratch,
                     ephd_slice_t *key, int *first);
/* p points at '"'. Appends the decoded UTF-8 to out and returns the position
 * after the closing quote, or NULL on a malformed string. */
const char *ephd_json_string(const char *p, const char *end, ephd_buf_t *out);
/* Appends s as a quoted JSON string. */
void ephd_json_write_string(ephd_buf_t *b, const char *s, size_t len);
/* Appends s escaped, without quotes (for ids built from several pieces). */
void ephd_json_write_escaped(ephd_buf_t *b, const char *s, size_t len);

#endif
