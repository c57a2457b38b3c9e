#include "gate.h"

void ephd_gate_init(ephd_gate_t *g, uint64_t *parked) {
  g->waiters.head = g->waiters.tail = NULL;
  g->waiters.count = 0;
  g->parked = parked;
}

void ephd_waiter_init(ephd_waiter_t *w, ephd_waiter_wake_cb wake,
                      ephd_waiter_flush_cb flush) {
  w->link.prev = w->link.next = NULL;
  w->gate = NULL;
  w->ring = NULL;
  w->wake = wake;
  w->flush = flush;
}

void ephd_gate_park(ephd_gate_t *g, ephd_waiter_t *w) {
  w->gate = g;
  ephd_list_append(&g->waiters, &w->link);
  if (g->parked) (*g->parked)++;
}

void ephd_gate_unpark(ephd_waiter_t *w) {
  ephd_gate_t *g = w->gate;
  if (g == NULL) return;
  ephd_list_remove(&g->waiters, &w->link);
  w->gate = NULL;
  if (g->parked) (*g->parked)--;
}

static ephd_waiter_t *waiter_of(ephd_node_t *n) {
  return EPHD_ENTRY(n, ephd_waiter_t, link);
}

void ephd_gate_wake(ephd_gate_t *g, void *ring) {
  ephd_waiter_t *w = waiter_of(g->waiters.head);
  while (w) {
    ephd_waiter_t *next = waiter_of(w->link.next);
    if (w->ring == NULL || w->ring == ring) {
      /* Nothing left for the first waiter that matches means nothing is left
       * for any later one of this group. */
      if (!w->wake(w)) return;
    }
    w = next;
  }
}

void ephd_gate_flush(ephd_gate_t *g) {
  while (g->waiters.head) {
    ephd_waiter_t *w = waiter_of(g->waiters.head);
    ephd_gate_unpark(w);
    w->flush(w);
  }
}
