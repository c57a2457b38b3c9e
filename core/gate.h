/* Gates: where a `wait=true` pop parks when its group has nothing, one gate
 * per (queue, group). A push or a redelivery wakes the gate it fed
 * directly; there is no polling anywhere. A gate only orders its waiters:
 * a parked pop's timeout is its deferred answer's deadline (http.h). */
#ifndef EPHD_GATE_H
#define EPHD_GATE_H

#include <stddef.h>
#include <stdint.h>

#include "list.h"

typedef struct ephd_waiter ephd_waiter_t;

/* Tries to answer a woken waiter; returns 1 if it did (and unparked it). */
typedef int (*ephd_waiter_wake_cb)(ephd_waiter_t *w);
/* The gate is going away (its queue is deleted) and has unparked w: answer
 * it now with what there is. */
typedef void (*ephd_waiter_flush_cb)(ephd_waiter_t *w);

typedef struct ephd_gate {
  ephd_list_t waiters; /* in arrival order */
  uint64_t *parked;    /* the owner's count over all its gates (a tenant's) */
} ephd_gate_t;

struct ephd_waiter {
  ephd_node_t link;
  /* NULL while not parked. A gate must not move while anything is parked
   * on it: the engine allocates each group (and its gate) on its own. */
  ephd_gate_t *gate;
  void *ring; /* the partition it waits on; NULL: any partition */
  ephd_waiter_wake_cb wake;
  ephd_waiter_flush_cb flush;
};

void ephd_gate_init(ephd_gate_t *g, uint64_t *parked);
static inline size_t ephd_gate_count(const ephd_gate_t *g) {
  return g->waiters.count;
}
void ephd_waiter_init(ephd_waiter_t *w, ephd_waiter_wake_cb wake,
                      ephd_waiter_flush_cb flush);
void ephd_gate_park(ephd_gate_t *g, ephd_waiter_t *w);
/* Leaves the gate, if parked. */
void ephd_gate_unpark(ephd_waiter_t *w);
/* Something became deliverable on ring (for this gate's group): wake waiters
 * in arrival order until one finds nothing. */
void ephd_gate_wake(ephd_gate_t *g, void *ring);
/* Unparks every waiter and answers it through flush, in arrival order. */
void ephd_gate_flush(ephd_gate_t *g);

#endif
