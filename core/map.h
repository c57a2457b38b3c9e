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

void ephd_map_init(ephd_map_t *m);
void ephd_map_free(ephd_map_t *m);
void *ephd_map_get(const ephd_map_t *m, const char *key, size_t len);
/* Inserts a key that is not present; the key memory must outlive the entry. */
void ephd_map_put(ephd_map_t *m, const char *key, size_t len, void *value);
void *ephd_map_del(ephd_map_t *m, const char *key, size_t len);
/* Iteration: *pos starts at 0; returns NULL when done. Stable only while the
 * map is not modified. */
void *ephd_map_next(const ephd_map_t *m, size_t *pos);

#endif
