/* An open-addressing hash map from byte-string keys to pointers. The map does
 * not own keys: each key points into the object stored as its value (a queue's
 * name, a lease's seq), so an entry costs no allocation of its own. */
#ifndef EPHD_MAP_H
#define EPHD_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint64_t hash; /* 0 marks an empty slot */
  const char *key;
  size_t len;
  void *value;
} ephd_map_slot_t;

typedef struct {
  ephd_map_slot_t *slots;
  size_t mask; /* capacity - 1; capacity is a power of two */
  size_t count;
} ephd_map_t;

/* A table's smallest capacity: an empty map has none. */
#define EPHD_MAP_MIN 8

/* The heap a map's table takes, in slots: it grows past 3/4 full and halves
 * below 1/8, so it follows the count both ways. */
static inline size_t ephd_map_capacity(const ephd_map_t *m) {
  return m->slots ? m->mask + 1 : 0;
}

void ephd_map_init(ephd_map_t *m);
void ephd_map_free(ephd_map_t *m);
void *ephd_map_get(const ephd_map_t *m, const char *key, size_t len);
/* Inserts a key that is not present; the key memory must outlive the entry. */
void ephd_map_put(ephd_map_t *m, const char *key, size_t len, void *value);
/* May shrink the table (freeing it at count 0). */
void *ephd_map_del(ephd_map_t *m, const char *key, size_t len);
/* Iteration: *pos starts at 0; returns NULL when done. Stable only while the
 * map is not modified: a put may grow the table and a del may shift entries
 * or shrink it, so a walk that removes entries collects them first or frees
 * the whole map after it. */
void *ephd_map_next(const ephd_map_t *m, size_t *pos);

#endif
