/* Placement: which member of the cell owns a (tenant, queue, partition), by
 * rendezvous (highest random weight) hashing over the live members, as
 * Queen places its partitions: every member scores the key, the highest
 * score wins, and equal scores go to the smaller id. Pure functions, no
 * I/O: every broker holding the same view computes the same owner.
 *
 * The hash is part of the cell's protocol, not a detail of this build:
 * brokers of different versions (a rolling upgrade) or byte orders must
 * agree, so it is defined here byte by byte and pinned by test vectors
 * (test/test_placement.c). Changing it needs every broker of a cell
 * stopped together. It is not the hash maps' hash (core/map.c), which is
 * free to change for speed.
 *
 *   mix(x)      MurmurHash3's 64-bit finalizer (fmix64): x ^= x >> 33;
 *               x *= 0xff51afd7ed558ccd; x ^= x >> 33;
 *               x *= 0xc4ceb9fe1a85ec53; x ^= x >> 33
 *   key         h = 0x9e3779b97f4a7c15; for the tenant, the queue and the
 *               partition in turn: h = mix(h ^ length), then for each
 *               8 bytes of the name read little-endian (the last group
 *               zero-padded): h = mix(h ^ word)
 *   score       mix(key ^ mix(member id))
 *
 * The lengths frame the names, so ("ab", "c") and ("a", "bc") differ. mix
 * is a bijection, so two ids never score a key alike; the id rule makes
 * the order total all the same. */
#ifndef EPHD_PLACEMENT_H
#define EPHD_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

/* http://host:port, as --advertise takes it. */
#define EPHD_MEMBER_ADDRESS_MAX 256

typedef struct {
  uint64_t id;    /* unique per broker incarnation; shown as 16 hex digits */
  uint32_t epoch; /* the incarnation's epoch, as in its message ids */
  char address[EPHD_MEMBER_ADDRESS_MAX]; /* where the others reach it */
} ephd_member_t;

/* The live members as one broker sees them, sorted by id; self is this
 * broker's index. Always holds this broker: count 1 is a cell of one, where
 * nothing is hashed. */
typedef struct {
  const ephd_member_t *members;
  uint32_t count;
  uint32_t self;
} ephd_view_t;

uint64_t ephd_placement_key(const char *tenant, size_t tenant_len,
                            const char *queue, size_t queue_len,
                            const char *partition, size_t partition_len);
uint64_t ephd_placement_score(uint64_t member_id, uint64_t key);
/* The rule: whether member a (its score and id) wins over member b. */
int ephd_placement_wins(uint64_t score_a, uint64_t id_a, uint64_t score_b,
                        uint64_t id_b);
/* The member that owns (tenant, queue, partition) in view; compare it with
 * &view->members[view->self] for "this broker". Callers skip it in a cell
 * of one (the hot path does not hash there), though it answers that too. */
const ephd_member_t *ephd_placement_owner(const ephd_view_t *view,
                                          const char *tenant, size_t tenant_len,
                                          const char *queue, size_t queue_len,
                                          const char *partition,
                                          size_t partition_len);

#endif
