#include "placement.h"

#include <endian.h>
#include <string.h>

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

/* Words are read little-endian, so the order is the same on every
 * machine, whatever its own: a whole word at once (le64toh is nothing on
 * the machines we run on), the tail byte by byte. */
static uint64_t absorb(uint64_t h, const char *p, size_t n) {
  h = mix(h ^ (uint64_t)n);
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    h = mix(h ^ le64toh(w));
  }
  if (n > 0) {
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
      w |= (uint64_t)(unsigned char)p[i] << (8 * i);
    h = mix(h ^ w);
  }
  return h;
}

uint64_t ephd_placement_key(const char *tenant, size_t tenant_len,
                            const char *queue, size_t queue_len,
                            const char *partition, size_t partition_len) {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  h = absorb(h, tenant, tenant_len);
  h = absorb(h, queue, queue_len);
  return absorb(h, partition, partition_len);
}

uint64_t ephd_placement_score(uint64_t member_id, uint64_t key) {
  return mix(key ^ mix(member_id));
}

int ephd_placement_wins(uint64_t score_a, uint64_t id_a, uint64_t score_b,
                        uint64_t id_b) {
  return score_a > score_b || (score_a == score_b && id_a < id_b);
}

const ephd_member_t *ephd_placement_owner(const ephd_view_t *view,
                                          const char *tenant, size_t tenant_len,
                                          const char *queue, size_t queue_len,
                                          const char *partition,
                                          size_t partition_len) {
  const ephd_member_t *m = view->members;
  if (view->count == 1) return m;
  uint64_t key = ephd_placement_key(tenant, tenant_len, queue, queue_len,
                                    partition, partition_len);
  const ephd_member_t *best = m;
  uint64_t top = ephd_placement_score(m->id, key);
  for (uint32_t i = 1; i < view->count; i++) {
    uint64_t s = ephd_placement_score(m[i].id, key);
    if (ephd_placement_wins(s, m[i].id, top, best->id)) {
      best = &m[i];
      top = s;
    }
  }
  return best;
}
