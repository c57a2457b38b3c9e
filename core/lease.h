/* Leases: a delivered, unsettled message held for one group until its
 * deadline. Every lease of the broker sits in one min-heap by deadline behind
 * one timer, so expiry costs O(log n) per lease and nothing while idle. */
#ifndef EPHD_LEASE_H
#define EPHD_LEASE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* A lease is one delivery: its seq is the number in the message id, minted
 * per delivery, so an ack from a delivery whose lease expired can never
 * settle the redelivery that replaced it. */
typedef struct ephd_lease {
  uint64_t seq; /* key in the cursor's lease map */
  uint64_t pos;
  struct ephd_lease *next_on_msg;
  uint64_t deadline_ms;
  uint32_t attempts;
  uint32_t heap_idx;
  uint32_t group;
  void *ring;  /* ephd_ring_t */
  void *queue; /* ephd_queue_t */
} ephd_lease_t;

/* The heap's first and smallest array, in leases: the broker has one heap,
 * and below a thousand leases a pop-then-ack of each batch would grow and
 * shrink it every time. */
#define EPHD_LEASES_MIN 1024

typedef void (*ephd_lease_expire_cb)(ephd_lease_t *lease, void *data);

typedef struct {
  ephd_lease_t **heap;
  size_t len, cap;
  uv_timer_t timer;
  int timer_armed;
  uint64_t armed_for;
  ephd_lease_expire_cb expire;
  void *data;
} ephd_leases_t;

void ephd_leases_init(ephd_leases_t *ls, uv_loop_t *loop,
                      ephd_lease_expire_cb expire, void *data);
void ephd_leases_close(ephd_leases_t *ls);
void ephd_leases_add(ephd_leases_t *ls, ephd_lease_t *l);
void ephd_leases_remove(ephd_leases_t *ls, ephd_lease_t *l);
/* Expires every lease due at now (the callback owns the lease afterwards) and
 * re-arms the timer for the next deadline. */
void ephd_leases_expire(ephd_leases_t *ls, uint64_t now_ms);

#endif
