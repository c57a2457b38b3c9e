/* The small parsers of untrusted text, each with a property: message ids
 * (EPHD_TEXT_ID: what parses, re-written, parses to the same), percent
 * decoding (EPHD_TEXT_URL: never longer than its input), and JSON values
 * (EPHD_TEXT_JSON: what skips is what a string walk or a re-skip agrees). */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "ffi.h"
#include "id.h"
#include "json.h"

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
  long n = ephd_url_decode(s, size, out, size % 2);
  if (n > (long)size) abort();
  free(out);
#else
  const char *end = ephd_json_skip(s, s + size);
  if (end && (end < s || end > s + size)) abort();
  if (size && s[0] == '"') {
    ephd_buf_t b;
    ephd_buf_init(&b);
    const char *q = ephd_json_string(s, s + size, &b);
    if ((q == NULL) != (end == NULL)) abort();
    ephd_buf_free(&b);
  }
#endif
  free(s);
  return 0;
}
