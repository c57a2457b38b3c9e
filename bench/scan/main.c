/* The push scanner alone over scenario 2's bodies: requests of 100 payloads
 * of 256 bytes (a JSON string of 254 bytes, as ephd-load sends), scanned
 * the way a push is. Run it under callgrind or `perf stat -e instructions`
 * to count what validating a payload costs, without HTTP or Lua:
 *   ephd-scan [ascii|utf8|mixed] [requests]
 * ascii is scenario 2's payload; utf8 is text of two-, three- and four-byte
 * characters only; mixed is ASCII with one accented letter per word. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "config.h"
#include "ffi.h"
#include "op.h"

enum { PAYLOADS = 100, PAYLOAD_BYTES = 256 };

/* One payload's string content, PAYLOAD_BYTES - 2 bytes long. */
static void content(ephd_buf_t *b, const char *kind) {
  static const char *const utf8[] = {"\xc3\xa9", "\xe6\x97\xa5",
                                     "\xf0\x9f\x98\x80", "\xce\xbb"};
  size_t want = b->len + PAYLOAD_BYTES - 2;
  for (int i = 0; b->len < want; i++) {
    const char *piece = "x";
    if (strcmp(kind, "utf8") == 0)
      piece = utf8[i % 4];
    else if (strcmp(kind, "mixed") == 0)
      piece = i % 8 == 7 ? "\xc3\xa9" : "x";
    size_t n = strlen(piece);
    if (b->len + n > want) piece = "x", n = 1;
    ephd_buf_append(b, piece, n);
  }
}

int main(int argc, char **argv) {
  const char *kind = argc > 1 ? argv[1] : "ascii";
  long requests = argc > 2 ? atol(argv[2]) : 2000;
  static ephd_settings_t settings;
  char *none[] = {argv[0]};
  ephd_config_load(&settings, 1, none, "/", "/");
  ephd_buf_t body;
  ephd_buf_init(&body);
  ephd_buf_appends(&body, "{\"queue\":\"bench\",\"messages\":[");
  for (int i = 0; i < PAYLOADS; i++) {
    ephd_buf_appends(&body, i ? ",{\"payload\":\"" : "{\"payload\":\"");
    content(&body, kind);
    ephd_buf_appends(&body, "\"}");
  }
  ephd_buf_appends(&body, "]}");
  ephd_request_t req;
  memset(&req, 0, sizeof(req));
  req.body.ptr = body.base;
  req.body.len = body.len;
  uint64_t bytes = 0;
  for (long r = 0; r < requests; r++) {
    ephd_op_attach(&req);
    if (ephd_ffi_push_scan(&req) != EPHD_OK) {
      fprintf(stderr, "ephd-scan: refused: %s\n", req.op->scan.message);
      return 1;
    }
    bytes += req.op->scan.bytes;
    ephd_op_release(&req);
  }
  ephd_op_close();
  printf("%s: %ld requests, %ld payloads, %llu payload bytes\n", kind, requests,
         requests * PAYLOADS, (unsigned long long)bytes);
  ephd_buf_free(&body);
  return 0;
}
