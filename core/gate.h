/* Gates: where a `wait=true` pop parks when its group has nothing, one gate
 * per (queue, group). A push or a redelivery wakes the gate it fed directly;
 * there is no polling anywhere. Each waiter carries its own timeout timer. */
#ifndef EPHD_GATE_H
#define EPHD_GATE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct ephd_waiter;

/* Tries to answer a woken waiter; returns 1 if it did (and unparked it). */
typedef int (*ephd_waiter_wake_cb)(struct ephd_waiter *w);
typedef void (*ephd_waiter_timeout_cb)(struct ephd_waiter *w);

typedef struct ephd_gate {
  struct ephd_waiter *head, *tail;
  size_t count;
  uint64_t *parked; /* the owner's count over all its gates (a tenant's) */
} ephd_gate_t;

typedef struct ephd_waiter {
  struct ephd_waiter *prev, *next;
  /* NULL while not parked. A gate must not move while anything is parked
   * on it: the engine allocates each group (and its gate) on its own. */
  ephd_gate_t *gate;
  /* The parked pop itself, re-run on each wake. */
  void *queue;
  void *ring; /* the partition it waits on; NULL: any partition */
  uint32_t group;
  uint32_t batch;
  int auto_ack;
  uint64_t deadline_ms; /* when its own timeout answers it */
  int windowed;         /* woken, and fattening its batch (windowBuffer) */
  uv_timer_t timer;
  ephd_waiter_wake_cb wake;
  ephd_waiter_timeout_cb timeout;
} ephd_waiter_t;

void ephd_gate_init(ephd_gate_t *g, uint64_t *parked);
void ephd_waiter_init(uv_loop_t *loop, ephd_waiter_t *w,
                      ephd_waiter_wake_cb wake, ephd_waiter_timeout_cb timeout);
/* The waiter's timer is a libuv handle: its owner closes it with its own
 * handles, and frees the waiter only after close_cb. */
void ephd_waiter_close(ephd_waiter_t *w, uv_close_cb close_cb);
void ephd_gate_park(ephd_gate_t *g, ephd_waiter_t *w, uint64_t timeout_ms);
void ephd_gate_unpark(ephd_waiter_t *w);
/* Moves a parked waiter's timeout to ms from now. */
void ephd_gate_rearm(ephd_waiter_t *w, uint64_t ms);
/* Something became deliverable on ring (for this gate's group): wake waiters
 * in arrival order until one finds nothing. */
void ephd_gate_wake(ephd_gate_t *g, void *ring);
/* Answers every waiter through its timeout path (queue deleted, shutdown). */
void ephd_gate_flush(ephd_gate_t *g);

#endif
