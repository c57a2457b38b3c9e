#include "map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Eight bytes a step: every push hashes its tenant (a 36-byte UUID) and its
 * queue name a few times, and byte-at-a-time FNV was a twentieth of a small
 * push. Each word is mixed in with a multiply and a rotation; the tail is
 * folded in as one zero-padded word, and the length keeps "a" and "a\0"
 * apart. 0 is reserved for empty slots. */
static uint64_t hash_bytes(const char *p, size_t n) {
  const uint64_t k = 0x9E3779B97F4A7C15ULL;
  uint64_t h = (uint64_t)n * k, w;
  while (n >= 8) {
    memcpy(&w, p, 8);
    h = (h ^ (w * k)) * 0xBF58476D1CE4E5B9ULL;
    h = h << 31 | h >> 33;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    w = 0;
    memcpy(&w, p, n);
    h = (h ^ (w * k)) * 0xBF58476D1CE4E5B9ULL;
  }
  h ^= h >> 29;
  h *= 0x94D049BB133111EBULL;
  h ^= h >> 32;
  return h ? h : 1;
}

void ephd_map_init(ephd_map_t *m) {
  m->slots = NULL;
  m->mask = 0;
  m->count = 0;
}

void ephd_map_free(ephd_map_t *m) {
  free(m->slots);
  ephd_map_init(m);
}

static ephd_map_slot_t *find(const ephd_map_t *m, uint64_t h, const char *key,
                             size_t len) {
  if (m->slots == NULL) return NULL;
  for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
    ephd_map_slot_t *s = &m->slots[i];
    if (s->hash == 0) return NULL;
    if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)
      return s;
  }
}

void *ephd_map_get(const ephd_map_t *m, const char *key, size_t len) {
  ephd_map_slot_t *s = find(m, hash_bytes(key, len), key, len);
  return s ? s->value : NULL;
}

static void place(ephd_map_slot_t *slots, size_t mask, ephd_map_slot_t e) {
  size_t i = e.hash & mask;
  while (slots[i].hash != 0) i = (i + 1) & mask;
  slots[i] = e;
}

/* Moves every entry into a new table of cap slots. */
static void resize(ephd_map_t *m, size_t cap) {
  ephd_map_slot_t *slots = calloc(cap, sizeof(*slots));
  if (slots == NULL) {
    fprintf(stderr, "ephd: out of memory resizing a map to %zu\n", cap);
    abort();
  }
  if (m->slots) {
    for (size_t i = 0; i <= m->mask; i++)
      if (m->slots[i].hash) place(slots, cap - 1, m->slots[i]);
    free(m->slots);
  }
  m->slots = slots;
  m->mask = cap - 1;
}

void ephd_map_put(ephd_map_t *m, const char *key, size_t len, void *value) {
  /* Load factor at most 3/4 keeps linear probe runs short. */
  if (m->slots == NULL)
    resize(m, EPHD_MAP_MIN);
  else if ((m->count + 1) * 4 > (m->mask + 1) * 3)
    resize(m, (m->mask + 1) * 2);
  ephd_map_slot_t e = {hash_bytes(key, len), key, len, value};
  place(m->slots, m->mask, e);
  m->count++;
}

void *ephd_map_del(ephd_map_t *m, const char *key, size_t len) {
  ephd_map_slot_t *s = find(m, hash_bytes(key, len), key, len);
  if (s == NULL) return NULL;
  void *value = s->value;
  /* Backward-shift deletion: no tombstones, so lookups never slow down as
   * inboxes come and go. */
  size_t i = (size_t)(s - m->slots);
  for (size_t j = (i + 1) & m->mask;; j = (j + 1) & m->mask) {
    ephd_map_slot_t *t = &m->slots[j];
    if (t->hash == 0) break;
    size_t home = t->hash & m->mask;
    /* t may move into the hole at i when its home is not in (i, j]. */
    if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
      m->slots[i] = *t;
      i = j;
    }
  }
  m->slots[i].hash = 0;
  m->count--;
  /* A table keeps only what its entries need: a cursor's lease map that
   * held 10,000 leases must not keep 16,384 slots for the one left. Halved
   * below an eighth full, it is about a quarter full, far from both
   * thresholds, so each resize is paid for by as many puts or deletes as
   * it moves entries: amortized O(1). */
  if (m->count == 0)
    ephd_map_free(m);
  else if (m->count < (m->mask + 1) / 8 && m->mask + 1 > EPHD_MAP_MIN)
    resize(m, (m->mask + 1) / 2);
  return value;
}

void *ephd_map_next(const ephd_map_t *m, size_t *pos) {
  if (m->slots == NULL) return NULL;
  while (*pos <= m->mask) {
    ephd_map_slot_t *s = &m->slots[(*pos)++];
    if (s->hash) return s->value;
  }
  return NULL;
}
