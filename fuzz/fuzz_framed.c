/* One field of a request fuzzed through the whole path: the input becomes
 * a pop query (EPHD_FRAME_QUERY) or a configure body (EPHD_FRAME_BODY), so
 * the fuzzer spends its time in that parser rather than in HTTP framing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 8192) return 0;
  char *req = malloc(size + 512);
#if defined(EPHD_FRAME_QUERY)
  int head = snprintf(req, 512, "GET /api/v1/ephemeral/pop?");
  memcpy(req + head, data, size);
  int tail = snprintf(req + head + size, 512, " HTTP/1.1\r\nHost: f\r\n\r\n");
  size_t n = (size_t)head + size + (size_t)tail;
#else
  int head = snprintf(req, 512,
                      "POST /api/v1/ephemeral/configure HTTP/1.1\r\n"
                      "Host: f\r\nContent-Length: %zu\r\n\r\n",
                      size);
  memcpy(req + head, data, size);
  size_t n = (size_t)head + size;
#endif
  ephd_fuzz_exchange((const uint8_t *)req, n, (uint8_t)size);
  free(req);
  return 0;
}
