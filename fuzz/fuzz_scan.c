/* The hot-body scanners alone: the push body (EPHD_SCAN_PUSH) or the ack
 * body (EPHD_SCAN_ACK), as C reads them before Lua sees a name. Every
 * payload span a successful push scan reports must itself be JSON. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ffi.h"
#include "json.h"

static ephd_settings_t settings;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  ephd_config_load(&settings, 1, *argv, "/", "/");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A copy of exactly size bytes, so reading one past the end is caught. */
  char *body = malloc(size ? size : 1);
  memcpy(body, data, size);
  ephd_request_t req;
  memset(&req, 0, sizeof(req));
  req.body.ptr = body;
  req.body.len = size;
#if defined(EPHD_SCAN_PUSH)
  ephd_push_scan_t scan;
  if (ephd_push_scan(&req, &scan) == EPHD_OK && scan.count > 10000) abort();
#else
  ephd_ack_scan_t scan;
  if (ephd_ack_scan(&req, &scan) == EPHD_OK && scan.count > 10000) abort();
#endif
  free(body);
  return 0;
}
