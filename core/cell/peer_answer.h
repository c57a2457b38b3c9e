/* A peer's answer read whole without llhttp, when it is the plain shape
 * every ephd answer has: the relay's fast path for pipelined answers. */
#ifndef EPHD_PEER_ANSWER_H
#define EPHD_PEER_ANSWER_H

#include <stddef.h>

#include "http_head.h" /* ephd_head_span_t: {off, len} from the answer's first byte */

typedef struct {
  int status;
  /* The first non-empty value of each (as peer_client's llhttp reading takes
   * it), trimmed as peer_client trims; len 0 when absent or empty. */
  ephd_head_span_t content_type, retry_after, owner;
  ephd_head_span_t body;
  int keep_alive; /* 0 on "Connection: close" */
} ephd_answer_t;

/* Reads the answer at buf when it is plain and whole: "HTTP/1.1", a status
 * 200..599 but 204 and 304, a reason of printable ASCII, token field names
 * right before their colon, printable ASCII values, exactly one Content-Length
 * (within max_body), no Transfer-Encoding or Upgrade and no connection header
 * but "Connection: keep-alive" or "close", the head within max_head raw bytes
 * and the body all in buf. Returns its length (head and body), or 0 when it is
 * anything else (incomplete, or not plain), which llhttp then reads from its
 * first byte: the relay hands on exactly what it would have without this
 * (fuzz/fuzz_peer_answer.c holds it to that). Not for the answer to a HEAD,
 * whose Content-Length frames no body. */
size_t ephd_answer_read_plain(const char *buf, size_t len, size_t max_head,
                              size_t max_body, ephd_answer_t *a);

#endif
