/* Message ids: "e:<epoch hex>:<partition>:<seq>". The epoch is drawn at boot,
 * which is what lets an ack from an earlier incarnation answer `stale`. The
 * partition may contain ':', so parsing reads from both ends. */
#ifndef EPHD_ID_H
#define EPHD_ID_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

typedef struct {
  uint32_t epoch;
  const char *partition;
  size_t partition_len;
  uint64_t seq;
} ephd_id_t;

/* Appends the id JSON-escaped (without quotes): the partition is a name. */
void ephd_id_write(ephd_buf_t *b, uint32_t epoch, const char *partition,
                   size_t partition_len, uint64_t seq);
/* Returns 0 and fills id when s is well formed, -1 otherwise. */
int ephd_id_parse(const char *s, size_t len, ephd_id_t *id);

#endif
