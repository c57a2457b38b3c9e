/* The scan's frame: what an edge's scan of a relayed push found, sent to
 * its owner so the owner need not scan the body again (a third of its work
 * on a single relayed push). One header line of the relayed request:
 *
 *   X-Queen-Scan: QUEUE PARTITION MESSAGE,MESSAGE...
 *
 * each OFF:LEN in decimal, a span of the body (a name inside its quotes, a
 * payload whole), PARTITION "-" when the push named none. Only a push
 * whose scan passed, whose names are clean and hold no escape (so the
 * body's bytes are the names), and that carries 1 to EPHD_FRAME_MAX
 * messages has one: any other is scanned at its owner, as are pushes
 * from clients (an X-Queen-Scan a client sends is never read: the frame
 * is believed only with a trusted forward mark, as the tenant is). */
#ifndef EPHD_SCAN_H
#define EPHD_SCAN_H

#include <stddef.h>

#include "ffi.h"

#define EPHD_FRAME_MAX 16
/* The line's start, before its value. */
#define EPHD_FRAME_NAME "X-Queen-Scan: "
/* The longest line: each span with the byte before it at most 22 bytes. */
#define EPHD_FRAME_LINE_MAX \
  (sizeof(EPHD_FRAME_NAME) - 1 + (2 + EPHD_FRAME_MAX) * 22 + 2)

/* Writes the header line for req's scan, CRLF included, at out (room for
 * EPHD_FRAME_LINE_MAX); returns its length, 0 when req gets none. */
size_t ephd_scan_frame(const ephd_request_t *req, char *out);

/* The scan of req's body out of frame (a trusted member's header value),
 * as ephd_ffi_push_scan would leave it: EPHD_OK, or EPHD_E_BAD_REQUEST
 * for a frame that is not one, which the caller answers by scanning. */
int ephd_scan_frame_read(const ephd_request_t *req, ephd_slice_t frame);

#endif
