#include "id.h"

#include "json.h"

void ephd_id_write(ephd_buf_t *b, uint32_t epoch, const char *partition,
                   size_t partition_len, uint64_t seq) {
  static const char hex[] = "0123456789abcdef";
  char e[10] = {'e', ':'};
  for (int i = 0; i < 8; i++) e[2 + i] = hex[(epoch >> (28 - 4 * i)) & 15];
  ephd_buf_append(b, e, sizeof(e));
  ephd_buf_append(b, ":", 1);
  ephd_json_write_escaped(b, partition, partition_len);
  ephd_buf_append(b, ":", 1);
  ephd_buf_append_u64(b, seq);
}

int ephd_id_parse(const char *s, size_t len, ephd_id_t *id) {
  if (len < 6 || s[0] != 'e' || s[1] != ':') return -1;
  size_t i = 2;
  uint64_t epoch = 0;
  while (i < len && s[i] != ':') {
    char c = s[i];
    int v;
    if (c >= '0' && c <= '9')
      v = c - '0';
    else if (c >= 'a' && c <= 'f')
      v = c - 'a' + 10;
    else
      return -1;
    epoch = epoch << 4 | (uint64_t)v;
    if (++i - 2 > 8) return -1;
  }
  if (i == 2 || i >= len) return -1;
  size_t part_start = i + 1;
  size_t j = len;
  uint64_t seq = 0, scale = 1;
  while (j > part_start && s[j - 1] >= '0' && s[j - 1] <= '9') {
    uint64_t d = (uint64_t)(s[j - 1] - '0');
    if (len - j >= 19) return -1; /* longer than any seq we mint */
    seq += d * scale;
    scale *= 10;
    j--;
  }
  if (j == len || j <= part_start || s[j - 1] != ':') return -1;
  id->epoch = (uint32_t)epoch;
  id->partition = s + part_start;
  id->partition_len = j - 1 - part_start;
  id->seq = seq;
  return 0;
}
