/* The hot-body scanners alone: the push body (EPHD_SCAN_PUSH) or the ack
 * body (EPHD_SCAN_ACK), as C reads them before Lua sees a name. A body
 * that scans has at most 10,000 items and is strict UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ffi.h"
#include "json.h"
#include "op.h"

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
  /* A body that scans is JSON, whose bytes outside strings are ASCII and
   * whose strings the walk checked: all of it is strict UTF-8. */
  ephd_op_attach(&req);
#if defined(EPHD_SCAN_PUSH)
  int ok = ephd_ffi_push_scan(&req) == EPHD_OK;
#else
  int ok = ephd_ffi_ack_scan(&req) == EPHD_OK;
#endif
  if (ok && (req.op->scan.count > 10000 ||
             ephd_ffi_utf8_valid(body, size) != EPHD_OK))
    abort();
  ephd_op_release(&req);
  free(body);
  return 0;
}
