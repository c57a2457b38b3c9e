/* One (queue, partition) FIFO: the messages in memory, one cursor per known
 * group, and the rules for eviction and reclaim. Positions are per ring and
 * only grow, so a position below head always means "gone". */
#ifndef EPHD_RING_H
#define EPHD_RING_H

#include <stddef.h>
#include <stdint.h>

#include "map.h"

struct ephd_lease;

typedef struct {
  uint64_t enqueued_ms;      /* for ttl */
  struct ephd_lease *leases; /* at most one per group, so eviction is exact */
  uint32_t len;
  uint32_t holds; /* leases and pending redeliveries, over all groups */
  char payload[]; /* the client's exact bytes */
} ephd_msg_t;

typedef struct {
  uint64_t pos;
  uint32_t attempts;
} ephd_redelivery_t;

/* One group's view of one ring. */
typedef struct {
  uint64_t next;    /* next position never yet delivered to this group */
  uint64_t skipped; /* messages evicted before this group reached them */
  /* Circular FIFO of failed or expired deliveries; like the lease map and
   * the ring's slots, it halves when sparse and is freed when empty. */
  ephd_redelivery_t *redo;
  uint32_t redo_head, redo_len, redo_cap;
  ephd_map_t leases; /* delivery seq (8 bytes) -> ephd_lease_t */
} ephd_cursor_t;

typedef struct {
  char *name;
  size_t name_len;
  ephd_msg_t **slots; /* index = pos & (cap - 1) */
  uint64_t cap;
  uint64_t head, tail; /* messages live at [head, tail) */
  uint64_t bytes;
  uint64_t charged; /* what the engine last charged for its messages */
  /* Indexed by the queue's group index, and moved when a group is added:
   * leases and waiters name a cursor by (ring, group), never by address. */
  ephd_cursor_t *cursors;
  uint32_t ncursors;
  /* Deliveries before this seq were of an earlier owner's copy: the ring
   * was emptied when the partition moved away, and their ids answer stale
   * (0: never moved). */
  uint64_t fence;
  /* The cell's marks (core/cell/handover.h). awaiting: this broker took the
   * partition over and its old owner's hand-over, with the groups it knew,
   * may still come: nothing is freed until it has, or its time passed.
   * adopted: handed over here, so handed on if it moves away. */
  uint8_t awaiting, adopted;
} ephd_ring_t;

ephd_ring_t *ephd_ring_new(const char *name, size_t len);
/* The caller has already removed this ring's leases from the lease heap. */
void ephd_ring_free(ephd_ring_t *r);
uint64_t ephd_ring_depth(const ephd_ring_t *r);
ephd_msg_t *ephd_ring_at(const ephd_ring_t *r, uint64_t pos);
/* Appends one message, copying the payload once into its own allocation. */
void ephd_ring_append(ephd_ring_t *r, uint64_t now_ms, const char *payload,
                      uint32_t len);
/* Frees the head message: cursors still below it skip it, and redeliveries
 * that pointed at it die lazily (their pos is now below head). Its leases
 * must already be gone. */
void ephd_ring_evict_head(ephd_ring_t *r);
/* Frees head messages that every group is past and nothing holds; nothing
 * while the ring is awaiting a hand-over. */
void ephd_ring_reclaim(ephd_ring_t *r);
/* Adds a cursor for a new group, starting at head: it sees what is still in
 * memory. */
void ephd_ring_add_cursor(ephd_ring_t *r);
/* The next delivery for a group: a pending redelivery first, then the next
 * new message. Returns 0 when there is nothing. A returned redelivery still
 * carries its hold; a new message carries none yet. */
int ephd_ring_take(ephd_ring_t *r, ephd_cursor_t *c, uint64_t *pos,
                   uint32_t *attempts, int *was_redelivery);
/* Whether a group has anything deliverable here, without taking it (it
 * drops the dead redeliveries a take would skip, and may shrink their
 * FIFO: the caller recharges the cursor's tables). */
int ephd_ring_ready(const ephd_ring_t *r, ephd_cursor_t *c);
void ephd_ring_redeliver(ephd_ring_t *r, ephd_cursor_t *c, uint64_t pos,
                         uint32_t attempts);
/* Deliveries a group could take here now: redeliveries plus new ones.
 * The depth read's pending (Queen's backlog: leased messages are not). */
uint64_t ephd_ring_available(const ephd_ring_t *r, const ephd_cursor_t *c);
/* Drops every message and rewinds every cursor to the (new, empty) head.
 * Returns how many messages were dropped. Leases must already be gone. */
uint64_t ephd_ring_clear(ephd_ring_t *r);

#endif
