#include "ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xalloc(size_t n) {
  void *p = calloc(1, n);
  if (p == NULL) {
    fprintf(stderr, "ephd: out of memory (%zu bytes)\n", n);
    abort();
  }
  return p;
}

ephd_ring_t *ephd_ring_new(const char *name, size_t len) {
  ephd_ring_t *r = xalloc(sizeof(*r));
  r->name = xalloc(len + 1);
  memcpy(r->name, name, len);
  r->name_len = len;
  return r;
}

static void cursor_free(ephd_cursor_t *c) {
  free(c->redo);
  ephd_map_free(&c->leases);
}

void ephd_ring_free(ephd_ring_t *r) {
  for (uint64_t p = r->head; p < r->tail; p++) free(ephd_ring_at(r, p));
  for (uint32_t i = 0; i < r->ncursors; i++) cursor_free(&r->cursors[i]);
  free(r->cursors);
  free(r->slots);
  free(r->name);
  free(r);
}

uint64_t ephd_ring_depth(const ephd_ring_t *r) { return r->tail - r->head; }

ephd_msg_t *ephd_ring_at(const ephd_ring_t *r, uint64_t pos) {
  return r->slots[pos & (r->cap - 1)];
}

static void resize_slots(ephd_ring_t *r, uint64_t cap) {
  ephd_msg_t **slots = xalloc(cap * sizeof(*slots));
  for (uint64_t p = r->head; p < r->tail; p++)
    slots[p & (cap - 1)] = ephd_ring_at(r, p);
  free(r->slots);
  r->slots = slots;
  r->cap = cap;
}

void ephd_ring_append(ephd_ring_t *r, uint64_t now_ms, const char *payload,
                      uint32_t len) {
  if (r->tail - r->head == r->cap) resize_slots(r, r->cap ? r->cap * 2 : 8);
  ephd_msg_t *m = malloc(sizeof(*m) + len);
  if (m == NULL) {
    fprintf(stderr, "ephd: out of memory for a %u-byte message\n", len);
    abort();
  }
  m->enqueued_ms = now_ms;
  m->leases = NULL;
  m->len = len;
  m->holds = 0;
  memcpy(m->payload, payload, len);
  r->slots[r->tail & (r->cap - 1)] = m;
  r->tail++;
  r->bytes += len;
}

static void free_head(ephd_ring_t *r) {
  ephd_msg_t *m = ephd_ring_at(r, r->head);
  r->bytes -= m->len;
  free(m);
  r->head++;
  /* An emptied ring gives its slot array back: 100k idle inboxes must not
   * each pin the array their busiest moment needed. Nor must one message
   * left of 10,000 pin 16,384 slots: below an eighth full the array
   * halves, as a map does (core/map.c), amortized O(1). */
  uint64_t depth = r->tail - r->head;
  if (r->cap <= 64) return;
  if (depth == 0) {
    free(r->slots);
    r->slots = NULL;
    r->cap = 0;
  } else if (depth < r->cap / 8) {
    resize_slots(r, r->cap / 2);
  }
}

void ephd_ring_evict_head(ephd_ring_t *r) {
  for (uint32_t i = 0; i < r->ncursors; i++) {
    ephd_cursor_t *c = &r->cursors[i];
    if (c->next <= r->head) {
      c->next = r->head + 1;
      c->skipped++;
    }
  }
  free_head(r);
}

void ephd_ring_reclaim(ephd_ring_t *r) {
  if (r->ncursors == 0 || r->awaiting) return;
  while (r->head < r->tail) {
    if (ephd_ring_at(r, r->head)->holds) return;
    for (uint32_t i = 0; i < r->ncursors; i++)
      if (r->cursors[i].next <= r->head) return;
    free_head(r);
  }
}

void ephd_ring_add_cursor(ephd_ring_t *r) {
  ephd_cursor_t *cs = realloc(r->cursors, (r->ncursors + 1) * sizeof(*cs));
  if (cs == NULL) {
    fprintf(stderr, "ephd: out of memory adding a cursor\n");
    abort();
  }
  r->cursors = cs;
  ephd_cursor_t *c = &cs[r->ncursors++];
  memset(c, 0, sizeof(*c));
  c->next = r->head;
  ephd_map_init(&c->leases);
}

/* Moves the pending redeliveries into an array of cap, oldest first. */
static void redo_resize(ephd_cursor_t *c, uint32_t cap) {
  ephd_redelivery_t *redo = xalloc(cap * sizeof(*redo));
  for (uint32_t i = 0; i < c->redo_len; i++)
    redo[i] = c->redo[(c->redo_head + i) % c->redo_cap];
  free(c->redo);
  c->redo = redo;
  c->redo_cap = cap;
  c->redo_head = 0;
}

static void redo_release(ephd_cursor_t *c) {
  free(c->redo);
  c->redo = NULL;
  c->redo_len = c->redo_head = c->redo_cap = 0;
}

/* A drained FIFO gives its array back, and a sparse one halves, as a map
 * does: 10,000 expired leases must not leave every cursor they passed
 * through holding 16,384 entries for one. Unlike a map's, the FIFO can lose
 * many entries at once (the dead ones in front are dropped together), so it
 * halves as often as it must, in one copy. */
static void redo_fit(ephd_cursor_t *c) {
  if (c->redo_len == 0) {
    redo_release(c);
    return;
  }
  uint32_t cap = c->redo_cap;
  while (cap > 4 && c->redo_len < cap / 8) cap /= 2;
  if (cap != c->redo_cap) redo_resize(c, cap);
}

static void redo_shift(ephd_cursor_t *c) {
  c->redo_head = (c->redo_head + 1) % c->redo_cap;
  c->redo_len--;
}

static void drop_dead_redeliveries(const ephd_ring_t *r, ephd_cursor_t *c) {
  while (c->redo_len && c->redo[c->redo_head].pos < r->head) redo_shift(c);
}

static uint64_t live_redeliveries(const ephd_ring_t *r,
                                  const ephd_cursor_t *c) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < c->redo_len; i++)
    if (c->redo[(c->redo_head + i) % c->redo_cap].pos >= r->head) n++;
  return n;
}

/* Exactly when ephd_ring_take would give one: a pop that finds nothing
 * parks on this answer, before it takes. The dead redeliveries in front go
 * first, as take would skip them: then the front is live or the FIFO is
 * empty, and every push's wake asks without walking it (a walk was
 * O(redeliveries) per wake of a caught-up group). */
int ephd_ring_ready(const ephd_ring_t *r, ephd_cursor_t *c) {
  uint64_t next = c->next < r->head ? r->head : c->next;
  if (next < r->tail) return 1;
  if (c->redo_len && c->redo[c->redo_head].pos < r->head) {
    drop_dead_redeliveries(r, c);
    redo_fit(c); /* as a take would: an empty FIFO keeps no array */
  }
  return c->redo_len > 0;
}

int ephd_ring_take(ephd_ring_t *r, ephd_cursor_t *c, uint64_t *pos,
                   uint32_t *attempts, int *was_redelivery) {
  if (c->redo) {
    drop_dead_redeliveries(r, c);
    if (c->redo_len) {
      ephd_redelivery_t d = c->redo[c->redo_head];
      redo_shift(c);
      redo_fit(c);
      *pos = d.pos;
      *attempts = d.attempts;
      *was_redelivery = 1;
      return 1;
    }
    redo_fit(c);
  }
  if (c->next < r->head) c->next = r->head;
  if (c->next >= r->tail) return 0;
  *pos = c->next++;
  *attempts = 0;
  *was_redelivery = 0;
  return 1;
}

void ephd_ring_redeliver(ephd_ring_t *r, ephd_cursor_t *c, uint64_t pos,
                         uint32_t attempts) {
  (void)r;
  if (c->redo_len == c->redo_cap)
    redo_resize(c, c->redo_cap ? c->redo_cap * 2 : 4);
  c->redo[(c->redo_head + c->redo_len) % c->redo_cap] =
      (ephd_redelivery_t){pos, attempts};
  c->redo_len++;
}

uint64_t ephd_ring_available(const ephd_ring_t *r, const ephd_cursor_t *c) {
  uint64_t next = c->next < r->head ? r->head : c->next;
  return (r->tail - next) + live_redeliveries(r, c);
}

uint64_t ephd_ring_clear(ephd_ring_t *r) {
  uint64_t dropped = r->tail - r->head;
  while (r->head < r->tail) free_head(r);
  for (uint32_t i = 0; i < r->ncursors; i++) {
    ephd_cursor_t *c = &r->cursors[i];
    c->next = r->head;
    redo_release(c);
  }
  return dropped;
}
