/* The hot-body scanners alone: the push body (EPHD_SCAN_PUSH) or the ack
 * body (EPHD_SCAN_ACK), as C reads them before Lua sees a name. A body
 * that scans has at most 10,000 items and is strict UTF-8. A push's scan,
 * framed (core/scan.h), reads back as itself; and the input cut at its
 * first newline into a frame and a body, the frame is read without a
 * read outside either and, taken, names only spans of the body. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ffi.h"
#include "json.h"
#include "op.h"
#include "scan.h"

static ephd_settings_t settings;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  ephd_config_load(&settings, 1, *argv, "/", "/");
  return 0;
}

#if defined(EPHD_SCAN_PUSH)
static int same(ephd_slice_t a, ephd_slice_t b) {
  return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

static void framed_back(const ephd_request_t *edge) {
  char line[EPHD_FRAME_LINE_MAX];
  size_t n = ephd_scan_frame(edge, line);
  if (n == 0) return;
  ephd_request_t owner;
  memset(&owner, 0, sizeof(owner));
  owner.body = edge->body;
  ephd_op_attach(&owner);
  size_t name = sizeof(EPHD_FRAME_NAME) - 1;
  ephd_slice_t value = {line + name, n - name - 2}; /* without CRLF */
  const ephd_scan_t *s = &edge->op->scan, *f = &owner.op->scan;
  const ephd_buf_t *si = &ephd_op_of(edge)->items,
                   *fi = &ephd_op_of(&owner)->items;
  if (ephd_scan_frame_read(&owner, value) != EPHD_OK || f->count != s->count ||
      f->bytes != s->bytes || f->has_partition != s->has_partition ||
      !same(f->queue, s->queue) || !same(f->partition, s->partition) ||
      fi->len != si->len || memcmp(fi->base, si->base, si->len) != 0)
    abort();
  ephd_op_release(&owner);
}

static void frame_then_body(const uint8_t *data, size_t size) {
  const uint8_t *nl = memchr(data, '\n', size);
  if (nl == NULL) return;
  size_t flen = (size_t)(nl - data), blen = size - flen - 1;
  char *frame = malloc(flen ? flen : 1), *body = malloc(blen ? blen : 1);
  memcpy(frame, data, flen);
  memcpy(body, nl + 1, blen);
  ephd_request_t req;
  memset(&req, 0, sizeof(req));
  req.body.ptr = body;
  req.body.len = blen;
  ephd_op_attach(&req);
  if (ephd_scan_frame_read(&req, (ephd_slice_t){frame, flen}) == EPHD_OK) {
    const ephd_span_t *m = (const ephd_span_t *)ephd_op_of(&req)->items.base;
    for (uint32_t i = 0; i < req.op->scan.count; i++)
      if ((uint64_t)m[i].off + m[i].len > blen) abort();
  }
  ephd_op_release(&req);
  free(frame);
  free(body);
}
#endif

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
#if defined(EPHD_SCAN_PUSH)
  if (ok) framed_back(&req);
  frame_then_body(data, size);
#endif
  ephd_op_release(&req);
  free(body);
  return 0;
}
