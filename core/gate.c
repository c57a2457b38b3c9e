#include "gate.h"

void ephd_gate_init(ephd_gate_t *g, uint64_t *parked) {
  g->head = g->tail = NULL;
  g->count = 0;
  g->parked = parked;
}

void ephd_waiter_init(ephd_waiter_t *w, ephd_waiter_wake_cb wake,
                      ephd_waiter_flush_cb flush) {
  w->prev = w->next = NULL;
  w->gate = NULL;
  w->ring = NULL;
  w->wake = wake;
  w->flush = flush;
}

void ephd_gate_park(ephd_gate_t *g, ephd_waiter_t *w) {
  w->gate = g;
  w->next = NULL;
  w->prev = g->tail;
  if (g->tail)
    g->tail->next = w;
  else
    g->head = w;
  g->tail = w;
  g->count++;
  if (g->parked) (*g->parked)++;
}

void ephd_gate_unpark(ephd_waiter_t *w) {
  ephd_gate_t *g = w->gate;
  if (g == NULL) return;
  if (w->prev)
    w->prev->next = w->next;
  else
    g->head = w->next;
  if (w->next)
    w->next->prev = w->prev;
  else
    g->tail = w->prev;
  w->prev = w->next = NULL;
  w->gate = NULL;
  g->count--;
  if (g->parked) (*g->parked)--;
}

void ephd_gate_wake(ephd_gate_t *g, void *ring) {
  ephd_waiter_t *w = g->head;
  while (w) {
    ephd_waiter_t *next = w->next;
    if (w->ring == NULL || w->ring == ring) {
      /* Nothing left for the first waiter that matches means nothing is left
       * for any later one of this group. */
      if (!w->wake(w)) return;
    }
    w = next;
  }
}

void ephd_gate_flush(ephd_gate_t *g) {
  while (g->head) {
    ephd_waiter_t *w = g->head;
    ephd_gate_unpark(w);
    w->flush(w);
  }
}
