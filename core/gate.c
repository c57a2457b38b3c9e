#include "gate.h"

void ephd_gate_init(ephd_gate_t *g, uint64_t *parked) {
  g->head = g->tail = NULL;
  g->count = 0;
  g->parked = parked;
}

static void on_timeout(uv_timer_t *t) {
  ephd_waiter_t *w = t->data;
  ephd_gate_unpark(w);
  w->timeout(w);
}

void ephd_waiter_init(uv_loop_t *loop, ephd_waiter_t *w,
                      ephd_waiter_wake_cb wake,
                      ephd_waiter_timeout_cb timeout) {
  w->prev = w->next = NULL;
  w->gate = NULL;
  w->ring = NULL;
  w->wake = wake;
  w->timeout = timeout;
  uv_timer_init(loop, &w->timer);
  w->timer.data = w;
}

void ephd_waiter_close(ephd_waiter_t *w, uv_close_cb close_cb) {
  ephd_gate_unpark(w);
  uv_close((uv_handle_t *)&w->timer, close_cb);
}

void ephd_gate_park(ephd_gate_t *g, ephd_waiter_t *w, uint64_t timeout_ms) {
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
  uv_timer_start(&w->timer, on_timeout, timeout_ms, 0);
}

void ephd_gate_rearm(ephd_waiter_t *w, uint64_t ms) {
  uv_timer_start(&w->timer, on_timeout, ms, 0);
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
  uv_timer_stop(&w->timer);
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
    w->timeout(w);
  }
}
