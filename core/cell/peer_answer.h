/* placeholder until the helper's module lands */
#ifndef EPHD_PEER_ANSWER_H
#define EPHD_PEER_ANSWER_H
#include <stddef.h>
#include "http_head.h"
typedef struct {
  int status;
  ephd_head_span_t content_type, retry_after, owner;
  ephd_head_span_t body;
  int keep_alive;
} ephd_answer_t;
size_t ephd_answer_read_plain(const char *buf, size_t len, size_t max_head,
                              size_t max_body, ephd_answer_t *a);
#endif
