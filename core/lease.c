#include "lease.h"

#include <stdio.h>
#include <stdlib.h>

static void set(ephd_leases_t *ls, size_t i, ephd_lease_t *l) {
  ls->heap[i] = l;
  l->heap_idx = (uint32_t)i;
}

static void sift_up(ephd_leases_t *ls, size_t i) {
  ephd_lease_t *l = ls->heap[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (ls->heap[parent]->deadline_ms <= l->deadline_ms) break;
    set(ls, i, ls->heap[parent]);
    i = parent;
  }
  set(ls, i, l);
}

static void sift_down(ephd_leases_t *ls, size_t i) {
  ephd_lease_t *l = ls->heap[i];
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= ls->len) break;
    if (child + 1 < ls->len &&
        ls->heap[child + 1]->deadline_ms < ls->heap[child]->deadline_ms)
      child++;
    if (ls->heap[child]->deadline_ms >= l->deadline_ms) break;
    set(ls, i, ls->heap[child]);
    i = child;
  }
  set(ls, i, l);
}

static void on_timer(uv_timer_t *t) {
  ephd_leases_t *ls = t->data;
  ls->timer_armed = 0;
  ephd_leases_expire(ls, uv_now(t->loop));
}

/* The timer only ever moves earlier on add; a removal leaves it armed and the
 * wake-up finds nothing due, which is cheaper than re-arming per ack. */
static void arm(ephd_leases_t *ls) {
  if (ls->len == 0) return;
  uint64_t due = ls->heap[0]->deadline_ms;
  if (ls->timer_armed && ls->armed_for <= due) return;
  uint64_t now = uv_now(ls->timer.loop);
  uv_timer_start(&ls->timer, on_timer, due > now ? due - now : 0, 0);
  ls->timer_armed = 1;
  ls->armed_for = due;
}

void ephd_leases_init(ephd_leases_t *ls, uv_loop_t *loop,
                      ephd_lease_expire_cb expire, void *data) {
  ls->heap = NULL;
  ls->len = ls->cap = 0;
  uv_timer_init(loop, &ls->timer);
  ls->timer.data = ls;
  uv_unref((uv_handle_t *)&ls->timer);
  ls->timer_armed = 0;
  ls->armed_for = 0;
  ls->expire = expire;
  ls->data = data;
}

void ephd_leases_close(ephd_leases_t *ls) {
  uv_close((uv_handle_t *)&ls->timer, NULL);
  free(ls->heap);
  ls->heap = NULL;
  ls->len = ls->cap = 0;
}

void ephd_leases_add(ephd_leases_t *ls, ephd_lease_t *l) {
  if (ls->len == ls->cap) {
    size_t cap = ls->cap ? ls->cap * 2 : EPHD_LEASES_MIN;
    ephd_lease_t **heap = realloc(ls->heap, cap * sizeof(*heap));
    if (heap == NULL) {
      fprintf(stderr, "ephd: out of memory growing the lease heap\n");
      abort();
    }
    ls->heap = heap;
    ls->cap = cap;
  }
  set(ls, ls->len++, l);
  sift_up(ls, ls->len - 1);
  arm(ls);
}

/* Halved once a quarter full, so a burst of deliveries gives its heap back
 * once settled, and an add and a remove at one size never both realloc: a
 * lease is charged for the four slots it may keep (engine.h). */
static void shrink(ephd_leases_t *ls) {
  if (ls->cap <= EPHD_LEASES_MIN || ls->len > ls->cap / 4) return;
  ephd_lease_t **heap = realloc(ls->heap, ls->cap / 2 * sizeof(*heap));
  if (heap == NULL) return; /* the larger array still serves */
  ls->heap = heap;
  ls->cap /= 2;
}

void ephd_leases_remove(ephd_leases_t *ls, ephd_lease_t *l) {
  size_t i = l->heap_idx;
  ephd_lease_t *last = ls->heap[--ls->len];
  if (i != ls->len) {
    set(ls, i, last);
    if (i > 0 && ls->heap[(i - 1) / 2]->deadline_ms > last->deadline_ms)
      sift_up(ls, i);
    else
      sift_down(ls, i);
  }
  shrink(ls);
}

void ephd_leases_expire(ephd_leases_t *ls, uint64_t now_ms) {
  while (ls->len && ls->heap[0]->deadline_ms <= now_ms) {
    ephd_lease_t *l = ls->heap[0];
    ephd_leases_remove(ls, l);
    ls->expire(l, ls->data);
  }
  if (ls->len == 0 && ls->timer_armed) {
    uv_timer_stop(&ls->timer);
    ls->timer_armed = 0;
  }
  arm(ls);
}
