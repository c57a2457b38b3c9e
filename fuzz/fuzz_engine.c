/* The engine as a state machine: each input is a sequence of verbs (push,
 * pop with and without wait, new groups, acks, reset, delete, declarations,
 * time passing for leases and parked timeouts, housekeeping, disconnects,
 * configures whose writes are in flight, partitions handed over)
 * run against one engine and its gates, as the commands drive them. Single
 * requests cannot reach bugs that need an order of events, such as a waiter
 * parked on a gate that a later pop moves; sequences can. After every verb
 * the engine's totals must agree with what the fuzzer itself holds. */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "engine.h"
#include "ffi.h"
#include "transfer.h"

#define NWAITERS 16
#define NIDS 64
#define NQUEUES 4

/* A parked pop, as pop.c keeps one in its request's operation. */
typedef struct {
  ephd_waiter_t w;
  ephd_queue_t *queue;
  uint32_t group, batch;
  uint64_t deadline;
  int in_use;
} fuzz_waiter_t;

typedef struct {
  char id[96];
  size_t len;
  uint8_t queue, group;
} fuzz_id_t;

static uv_loop_t loop;
static ephd_engine_t e;
static ephd_tenant_limits_t limits;
static fuzz_waiter_t waiters[NWAITERS];
static fuzz_id_t ids[NIDS];
static uint32_t nids;
static uint64_t now;
static ephd_buf_t out;
static uint64_t parked_waiters;
/* Configures of new queues whose database writes are in flight. */
#define NWRITES 4
static uint8_t writes[NWRITES];
static uint32_t nwrites;

static const uint8_t *in;
static size_t left;

static uint8_t next_byte(void) {
  if (left == 0) return 0;
  left--;
  return *in++;
}

static const char *const tenants[] = {"a", "b"};
static const char *const queues[NQUEUES] = {"q0", "q1", "q2", "q3"};
static const char *const partitions[] = {"Default", "p1", "p2", "p3"};

/* Group names: 0 is queue mode; the rest come from a pool large enough that
 * new groups keep appearing. */
static size_t group_name(uint8_t b, char *name) {
  if (b % 32 == 0) return 0;
  return (size_t)snprintf(name, 8, "g%u", b % 32);
}

static const char *tenant_of(uint8_t qi) { return tenants[qi / NQUEUES % 2]; }

static ephd_queue_t *find_queue(uint8_t qi) {
  return ephd_engine_queue(&e, tenant_of(qi), 1, queues[qi % NQUEUES], 2);
}

/* Keeps the ids of a pop's deliveries for later acks. */
static void remember_ids(uint8_t qi, uint8_t gb) {
  const char *p = out.base, *end = out.base + out.len;
  while (p && (p = memmem(p, (size_t)(end - p), "\"id\":\"", 6))) {
    p += 6;
    const char *q = memchr(p, '"', (size_t)(end - p));
    if (q == NULL) break;
    fuzz_id_t *slot = &ids[nids++ % NIDS];
    slot->len = (size_t)(q - p) < sizeof(slot->id) ? (size_t)(q - p) : 0;
    memcpy(slot->id, p, slot->len);
    slot->queue = qi;
    slot->group = gb;
    p = q;
  }
}

static int waiter_wake(ephd_waiter_t *w) {
  fuzz_waiter_t *fw = (fuzz_waiter_t *)w;
  if (!ephd_engine_ready(fw->queue, w->ring, fw->group)) return 0;
  ephd_gate_unpark(w);
  out.len = 0;
  ephd_engine_pop(&e, fw->queue, w->ring, fw->group, fw->batch, 1, now, &out,
                  SIZE_MAX);
  fw->in_use = 0;
  parked_waiters--;
  return 1;
}

/* Its timeout passed, or its gate was flushed (its queue deleted). */
static void waiter_timeout(ephd_waiter_t *w) {
  ((fuzz_waiter_t *)w)->in_use = 0;
  parked_waiters--;
}

static void push(uint8_t qi) {
  uint8_t pb = next_byte(), nb = next_byte();
  const char *part = partitions[pb % 4];
  uint32_t n = 1 + nb % 4;
  static const char base[] = "1234567890";
  ephd_span_t spans[4];
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < n; i++) {
    spans[i].off = 0;
    spans[i].len = 1 + (nb >> 2) % 10;
    bytes += spans[i].len;
  }
  const char *t = tenant_of(qi), *qn = queues[qi % NQUEUES];
  ephd_tenant_t *tenant = ephd_engine_tenant(&e, t, 1);
  ephd_queue_t *q = find_queue(qi);
  if (q) ephd_engine_expire(&e, q, now);
  ephd_ring_t *r = q ? ephd_queue_ring(q, part, strlen(part)) : NULL;
  ephd_push_plan_t plan;
  ephd_engine_plan_push(&e, tenant, 1, q, 2, r, strlen(part), n, bytes, &limits,
                        NULL, &plan);
  if (plan.refusals) return;
  if (q == NULL) q = ephd_engine_queue_open(&e, t, 1, qn, 2);
  if (r == NULL) r = ephd_queue_ring_open(q, part, strlen(part));
  ephd_engine_push(&e, q, r, base, spans, n, &plan, now);
  ephd_engine_touch(&e, q, now);
}

static void pop(uint8_t qi, int wait) {
  uint8_t gb = next_byte(), pb = next_byte(), flags = next_byte();
  char gname[8];
  size_t glen = group_name(gb, gname);
  const char *part = pb % 5 ? NULL : partitions[pb / 5 % 4];
  const char *t = tenant_of(qi), *qn = queues[qi % NQUEUES];
  ephd_tenant_t *tenant = ephd_engine_tenant(&e, t, 1);
  ephd_queue_t *q = find_queue(qi);
  ephd_ring_t *r = part && q ? ephd_queue_ring(q, part, strlen(part)) : NULL;
  uint32_t g = 0;
  int new_ring = part && r == NULL;
  int new_group = q == NULL || !ephd_queue_group_find(q, gname, glen, &g);
  /* As ephd_ffi_pop: everything planned before anything is created. */
  if (q == NULL && ephd_tenant_full_of_queues(tenant, &limits)) return;
  if (q && ((new_ring && ephd_queue_full_of_partitions(&e, q)) ||
            (glen && new_group && ephd_queue_full_of_groups(&e, q))))
    return;
  if (ephd_engine_plan_names(&e, tenant, 1, q, 2, new_ring,
                             part ? strlen(part) : 0, new_group, glen, &limits))
    return;
  /* What ephd_ffi_pop decides a refusal for parked slots on, before creating:
   * it must be exactly whether the pop delivers. */
  int ready = ephd_engine_would_deliver(&e, q, r, new_ring, new_group, g, now);
  if (q == NULL) q = ephd_engine_queue_open(&e, t, 1, qn, 2);
  if (new_ring) r = ephd_queue_ring_open(q, part, strlen(part));
  if (new_group) g = ephd_queue_group_open(q, gname, glen);
  ephd_engine_touch(&e, q, now);
  out.len = 0;
  uint32_t batch = 1 + flags % 4;
  int auto_ack = (flags >> 2) & 1;
  /* A relayed pop's bound on its answer's bytes (core/pop.c), or none:
   * bounded, it still takes one delivery, so readiness is unchanged. */
  size_t max_bytes = (flags >> 6) & 1 ? 1 : SIZE_MAX;
  uint32_t got =
      ephd_engine_pop(&e, q, r, g, batch, auto_ack, now, &out, max_bytes);
  if ((got > 0) != ready) abort();
  if (max_bytes == 1 && got > 1) abort();
  if (got && !auto_ack) remember_ids(qi, gb);
  if (got || !wait) return;
  for (int i = 0; i < NWAITERS; i++) {
    fuzz_waiter_t *fw = &waiters[i];
    if (fw->in_use) continue;
    fw->in_use = 1;
    ephd_waiter_init(&fw->w, waiter_wake, waiter_timeout);
    fw->w.ring = r;
    fw->queue = q;
    fw->group = g;
    fw->batch = batch;
    fw->deadline = now + 1000u * (1 + (flags >> 3) % 8);
    /* Time is the fuzzer's: timeouts are answered by advance(), as the
     * request's deadline would. */
    ephd_gate_park(ephd_queue_gate(q, g), &fw->w);
    parked_waiters++;
    return;
  }
}

static void ack(void) {
  uint8_t ib = next_byte(), sb = next_byte();
  if (nids == 0) return;
  fuzz_id_t *id = &ids[ib % (nids < NIDS ? nids : NIDS)];
  ephd_queue_t *q = find_queue(id->queue);
  char gname[8];
  size_t glen = group_name(id->group, gname);
  uint32_t g = UINT32_MAX;
  if (q && !ephd_queue_group_find(q, gname, glen, &g)) g = UINT32_MAX;
  static const ephd_ack_status_t statuses[] = {EPHD_ACK_COMPLETED,
                                               EPHD_ACK_FAILED, EPHD_ACK_RETRY};
  ephd_engine_ack(&e, q, g, id->id, id->len, statuses[sb % 3], now);
}

/* Time passes: leases expire into redeliveries and parked pops whose
 * timeout has come are answered empty, as their timers would. */
static void advance(void) {
  now += 100u * next_byte();
  ephd_leases_expire(&e.leases, now);
  for (int i = 0; i < NWAITERS; i++) {
    fuzz_waiter_t *fw = &waiters[i];
    if (fw->in_use && fw->w.gate && fw->deadline <= now) {
      ephd_gate_unpark(&fw->w);
      waiter_timeout(&fw->w);
    }
  }
}

/* A client goes away while its pop is parked. */
static void disconnect(void) {
  fuzz_waiter_t *fw = &waiters[next_byte() % NWAITERS];
  if (!fw->in_use) return;
  ephd_gate_unpark(&fw->w);
  fw->in_use = 0;
  parked_waiters--;
}

static void declare(uint8_t qi) {
  uint8_t a = next_byte(), b = next_byte();
  if (a % 4 == 0) {
    ephd_queue_t *q = find_queue(qi);
    if (q) ephd_engine_undeclare(&e, q);
    return;
  }
  ephd_options_t o = {64 + 16u * (a >> 2),
                      1 + b % 16,
                      (b >> 4) & 1,
                      (b >> 5) % 4,
                      1 + a % 8,
                      (a >> 3) % 4,
                      0,
                      0};
  ephd_engine_declare(&e, tenant_of(qi), 1, queues[qi % NQUEUES], 2, &o, 1);
}

/* A partition moves, as a hand-over moves it: written out and wiped here,
 * then adopted by a queue (another broker's copy, in a cell) under the
 * budgets alone: the queue's bounds never refuse nor evict it. */
static void move(uint8_t qi) {
  uint8_t pb = next_byte(), to = next_byte();
  ephd_queue_t *q = find_queue(qi);
  const char *part = partitions[pb % 4];
  ephd_ring_t *r = q ? ephd_queue_ring(q, part, strlen(part)) : NULL;
  if (r == NULL) return;
  ephd_buf_t wire;
  ephd_buf_init(&wire);
  ephd_transfer_write(&wire, q, r, now);
  ephd_transfer_t t;
  const char *why;
  if (ephd_transfer_parse(wire.base, wire.len, 512, &t, &why) != 0) abort();
  uint64_t bytes;
  ephd_engine_wipe(&e, q, r, &bytes);
  const char *tn = tenant_of(to);
  ephd_queue_t *dq = find_queue(to);
  ephd_ring_t *dr = dq ? ephd_queue_ring(dq, part, strlen(part)) : NULL;
  ephd_push_plan_t plan;
  ephd_engine_plan_accept(&e, ephd_engine_tenant(&e, tn, 1), 1, dq, 2, dr,
                          strlen(part), t.nmsgs, t.bytes, &limits, &plan);
  if (plan.refusals & (EPHD_REFUSE_QUEUE_FULL | EPHD_REFUSE_QUEUE_TOO_SMALL |
                       EPHD_REFUSE_QUEUE_CROWDED) ||
      plan.evict)
    abort();
  if (plan.refusals == 0) {
    if (dq == NULL)
      dq = ephd_engine_queue_open(&e, tn, 1, queues[to % NQUEUES], 2);
    if (dr == NULL) dr = ephd_queue_ring_open(dq, part, strlen(part));
    ephd_engine_accept(&e, dq, dr, &t, now);
    ephd_engine_touch(&e, dq, now);
  }
  ephd_transfer_free(&t);
  ephd_buf_free(&wire); /* t points into it */
}

/* A structure that grows with what it holds shrinks with it too: below an
 * eighth full it has halved, unless it is at its smallest, and empty it is
 * gone. */
static void check_fit(uint64_t used, uint64_t cap, uint64_t smallest) {
  if ((used == 0 && cap != 0 && cap > smallest) ||
      (cap > smallest && used * 8 < cap))
    abort();
}

/* A configure of a new queue passes its checks and reserves what it will
 * create, as ephd_ffi_configure does before its database write. */
static void configure(uint8_t qi) {
  const char *t = tenant_of(qi);
  if (find_queue(qi) || nwrites == NWRITES) return;
  if (ephd_engine_plan_queue(&e, ephd_engine_tenant(&e, t, 1), 1, 2, &limits))
    return;
  ephd_engine_reserve_queue(&e, t, 1, 2);
  writes[nwrites++] = qi;
}

/* The oldest write completes, as on_configured: the reservation is given
 * back, then the queue declared if the write succeeded. */
static void configured(void) {
  uint8_t ok = next_byte();
  if (nwrites == 0) return;
  uint8_t qi = writes[0];
  memmove(writes, writes + 1, --nwrites);
  ephd_engine_release_queue(&e, tenant_of(qi), 1, 2);
  if (ok & 1) {
    ephd_options_t o = e.defaults;
    ephd_engine_declare(&e, tenant_of(qi), 1, queues[qi % NQUEUES], 2, &o, 1);
  }
}

/* What a queue holds, counted from its structures, in the engine's costs. */
static uint64_t recount(const ephd_queue_t *q) {
  uint64_t n = ephd_cost_queue(q->name_len);
  for (uint32_t i = 0; i < q->nrings; i++) {
    const ephd_ring_t *r = q->rings[i];
    if (r->charged != ephd_cost_messages(r)) abort();
    check_fit(ephd_ring_depth(r), r->cap, 64);
    n += ephd_cost_ring(r->name_len) + r->charged;
    for (uint32_t c = 0; c < r->ncursors; c++) {
      const ephd_cursor_t *cur = &r->cursors[c];
      if ((cur->leases.count == 0) != (cur->leases.slots == NULL)) abort();
      check_fit(cur->leases.count, ephd_map_capacity(&cur->leases),
                EPHD_MAP_MIN);
      if ((cur->redo_len == 0) != (cur->redo == NULL)) abort();
      check_fit(cur->redo_len, cur->redo_cap, 4);
      n += EPHD_COST_CURSOR + ephd_cost_cursor_tables(cur) +
           cur->leases.count * EPHD_COST_LEASE;
    }
  }
  for (uint32_t i = 0; i < q->ngroups; i++)
    n += ephd_cost_group(q->groups[i]->len);
  return n;
}

/* What the engine counts must be what it holds. */
static void check(void) {
  uint64_t cell = 0, parked = 0;
  size_t pos = 0;
  ephd_tenant_t *t;
  while ((t = ephd_map_next(&e.tenants, &pos))) {
    uint64_t bytes = 0;
    size_t p2 = 0;
    ephd_queue_t *q;
    while ((q = ephd_map_next(&t->queues, &p2))) {
      uint64_t depth = 0, payload = 0;
      for (uint32_t i = 0; i < q->nrings; i++) {
        depth += ephd_ring_depth(q->rings[i]);
        payload += q->rings[i]->bytes;
      }
      if (depth != q->depth || payload != q->bytes) abort();
      if (recount(q) != q->footprint) abort();
      bytes += q->footprint;
    }
    uint32_t reserved = 0;
    for (uint32_t i = 0; i < nwrites; i++)
      if (tenant_of(writes[i])[0] == t->name[0]) reserved++;
    if (reserved != t->reserved_queues ||
        t->reserved_bytes != reserved * ephd_cost_queue(2) ||
        bytes + t->reserved_bytes != t->bytes)
      abort();
    cell += ephd_cost_tenant(t->len) + t->bytes;
    parked += t->parked;
  }
  if (cell != e.cell_bytes || parked != parked_waiters) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  in = data;
  left = size;
  uv_loop_init(&loop);
  ephd_engine_config_t config = {
      .epoch = 7,
      .defaults = {256, 32, 0, 0, 5, 3, 0, 0},
      .max_cell_bytes = 16384,
      .idle_ms = 2000,
      .max_partitions = 3,
      .max_groups = 12,
  };
  ephd_engine_init(&e, &loop, &config);
  memset(&limits, 0, sizeof(limits));
  limits.max_bytes = 8192;
  limits.max_queues = 3;
  now = uv_now(&loop);
  nids = 0;
  nwrites = 0;
  parked_waiters = 0;
  for (int i = 0; i < NWAITERS; i++) waiters[i].in_use = 0;
  while (left) {
    uint8_t op = next_byte(), qi = next_byte();
    switch (op % 15) {
      case 0:
      case 1:
        push(qi);
        break;
      case 2:
        pop(qi, 0);
        break;
      case 3:
      case 4:
        pop(qi, 1);
        break;
      case 5:
        ack();
        break;
      case 6: {
        ephd_queue_t *q = find_queue(qi);
        if (q) ephd_engine_reset(&e, q);
        break;
      }
      case 7: {
        ephd_queue_t *q = find_queue(qi);
        if (q) ephd_engine_delete(&e, q);
        break;
      }
      case 8:
        advance();
        break;
      case 9:
        ephd_engine_housekeep(&e, now);
        break;
      case 10:
        disconnect();
        break;
      case 11:
        declare(qi);
        break;
      case 12:
        configure(qi);
        break;
      case 13:
        configured();
        break;
      case 14:
        move(qi);
        break;
    }
    check();
  }
  while (nwrites) configured();
  for (int i = 0; i < NWAITERS; i++) ephd_gate_unpark(&waiters[i].w);
  ephd_engine_close(&e);
  uv_run(&loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&loop) != 0) abort();
  ephd_buf_free(&out);
  return 0;
}
