/* The small parsers of untrusted text, each with a property: message ids
 * (EPHD_TEXT_ID: what parses, re-written, parses to the same), percent
 * decoding (EPHD_TEXT_URL: never longer than its input), JSON values
 * (EPHD_TEXT_JSON: what skips is what a string walk agrees, and a string
 * decodes to UTF-8), and strict UTF-8 (EPHD_TEXT_UTF8: the validator, the
 * JSON walk and a reference written from RFC 3629's table all agree), and
 * an ack's answer as a split ack reads a member's (EPHD_TEXT_ACK_ANSWER:
 * what reads as n outcomes, written again, reads as the same). */
#include <stdlib.h>
#include <string.h>

#include "ack_result.h"
#include "buf.h"
#include "ffi.h"
#include "relay_edge.h"
#include "id.h"
#include "json.h"

#if defined(EPHD_TEXT_UTF8)
/* RFC 3629 section 4, transcribed: each lead byte's range for the byte
 * after it; the rest are 80..BF. */
static int reference_valid(const unsigned char *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    unsigned c = s[i], lo = 0x80, hi = 0xBF;
    size_t n;
    if (c <= 0x7F) {
      i++;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c == 0xE0) {
      n = 3, lo = 0xA0;
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
      n = 3;
    } else if (c == 0xED) {
      n = 3, hi = 0x9F;
    } else if (c == 0xF0) {
      n = 4, lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3) {
      n = 4;
    } else if (c == 0xF4) {
      n = 4, hi = 0x8F;
    } else {
      return 0;
    }
    if (len - i < n || s[i + 1] < lo || s[i + 1] > hi) return 0;
    for (size_t k = 2; k < n; k++)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
    i += n;
  }
  return 1;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size ? size : 1);
  memcpy(s, data, size);
#if defined(EPHD_TEXT_ID)
  ephd_id_t id;
  if (ephd_id_parse(s, size, &id) == 0) {
    ephd_buf_t b;
    ephd_buf_init(&b);
    ephd_buf_t part;
    ephd_buf_init(&part);
    /* The id is written escaped; its partition is raw here. */
    ephd_buf_append(&part, id.partition, id.partition_len);
    ephd_id_write(&b, id.epoch, part.base ? part.base : "", part.len, id.seq);
    ephd_buf_free(&part);
    ephd_buf_free(&b);
  }
#elif defined(EPHD_TEXT_URL)
  char *out = malloc(size ? size : 1);
  long n = ephd_ffi_url_decode(s, size, out, size % 2);
  if (n > (long)size) abort();
  free(out);
#elif defined(EPHD_TEXT_UTF8)
  /* The JSON walk sees the bytes between quotes, where the bytes it stops
   * at anyway (quote, backslash, control) are made plain first. */
  char *quoted = malloc(size + 2);
  quoted[0] = quoted[size + 1] = '"';
  for (size_t i = 0; i < size; i++) {
    unsigned char c = (unsigned char)s[i];
    quoted[i + 1] = c < 0x20 || c == '"' || c == '\\' ? 'x' : s[i];
  }
  int want = reference_valid((const unsigned char *)quoted + 1, size);
  if ((ephd_ffi_utf8_valid(quoted + 1, size) == EPHD_OK) != want) abort();
  const char *end = ephd_json_skip(quoted, quoted + size + 2);
  if ((end == quoted + size + 2) != want) abort();
  free(quoted);
#elif defined(EPHD_TEXT_ACK_ANSWER)
  /* The first byte says how many results to expect. */
  uint32_t n = size ? (unsigned char)s[0] % 16 : 0;
  ephd_outcome_t got[16], again[16];
  if (size && ephd_relay_ack_outcomes(s + 1, size - 1, got, n) == 0) {
    ephd_buf_t b;
    ephd_buf_init(&b);
    ephd_buf_appends(&b, "{\"results\":[");
    for (uint32_t i = 0; i < n; i++)
      ephd_ack_write_result(&b, i == 0, "e:1:p:1", 7, got[i]);
    ephd_buf_appends(&b, "]}");
    if (ephd_relay_ack_outcomes(b.base, b.len, again, n) != 0 ||
        memcmp(got, again, n * sizeof(got[0])) != 0)
      abort();
    ephd_buf_free(&b);
  }
#else
  const char *end = ephd_json_skip(s, s + size);
  if (end && (end < s || end > s + size)) abort();
  if (size && s[0] == '"') {
    ephd_buf_t b;
    ephd_buf_init(&b);
    const char *q = ephd_json_string(s, s + size, &b);
    if ((q == NULL) != (end == NULL)) abort();
    if (q && ephd_ffi_utf8_valid(b.base ? b.base : "", b.len) != EPHD_OK)
      abort();
    ephd_buf_free(&b);
  }
  /* Written escaped and read back, any valid UTF-8 is itself again. */
  if (ephd_ffi_utf8_valid(s, size) == EPHD_OK) {
    ephd_buf_t w, r;
    ephd_buf_init(&w);
    ephd_buf_init(&r);
    ephd_json_write_string(&w, s, size);
    const char *q = ephd_json_string(w.base, w.base + w.len, &r);
    if (q != w.base + w.len || r.len != size ||
        (size && memcmp(r.base, s, size) != 0))
      abort();
    ephd_buf_free(&w);
    ephd_buf_free(&r);
  }
#endif
  free(s);
  return 0;
}
