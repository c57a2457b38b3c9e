#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffi.h"
#include "id.h"
#include "json.h"
#include "transfer.h"

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p == NULL) {
    fprintf(stderr, "ephd: out of memory (%zu x %zu bytes)\n", n, size);
    abort();
  }
  return p;
}

static char *xstrndup(const char *s, size_t len) {
  char *p = xcalloc(1, len + 1);
  memcpy(p, s, len);
  return p;
}

static void on_lease_expired(ephd_lease_t *l, void *data);

static ephd_queue_t *queue_of(ephd_node_t *n) {
  return EPHD_ENTRY(n, ephd_queue_t, link);
}

static ephd_tenant_t *tenant_of(ephd_node_t *n) {
  return EPHD_ENTRY(n, ephd_tenant_t, empty_link);
}

/* Every byte the engine holds for a queue is charged here, so the queue's,
 * the tenant's and the cell's footprints can never disagree. Unsigned
 * arithmetic wraps, so a negative d subtracts. */
static void charge(ephd_queue_t *q, uint64_t d) {
  q->footprint += d;
  q->tenant->bytes += d;
  *q->tenant->cell_bytes += d;
}

static void uncharge(ephd_queue_t *q, uint64_t d) {
  charge(q, (uint64_t)0 - d);
}

/* A cursor's lease map and redelivery FIFO resize as they fill and drain:
 * whatever a change did to their capacity since `before` is charged. */
static void recharge_tables(ephd_queue_t *q, const ephd_cursor_t *c,
                            uint64_t before) {
  uint64_t after = ephd_cost_cursor_tables(c);
  if (after != before) charge(q, after - before);
}

static uint64_t ring_tables(const ephd_ring_t *r) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < r->ncursors; i++)
    n += ephd_cost_cursor_tables(&r->cursors[i]);
  return n;
}

static ephd_list_t *list_of(ephd_engine_t *e, ephd_queue_t *q) {
  return q->declared ? &e->declared : &e->idle;
}

static void on_housekeeping(uv_timer_t *t) {
  ephd_engine_t *e = t->data;
  ephd_engine_housekeep(e, uv_now(t->loop));
}

void ephd_engine_init(ephd_engine_t *e, uv_loop_t *loop,
                      const ephd_engine_config_t *config) {
  memset(e, 0, sizeof(*e));
  e->epoch = config->epoch;
  e->next_seq = 1;
  ephd_map_init(&e->tenants);
  e->defaults = config->defaults;
  e->max_cell_bytes = config->max_cell_bytes;
  uint64_t idle_ms = config->idle_ms;
  e->idle_ms = idle_ms;
  e->forget_ms = config->forget_ms ? config->forget_ms : idle_ms;
  e->max_partitions = config->max_partitions;
  e->max_groups = config->max_groups;
  e->loop = loop;
  ephd_leases_init(&e->leases, loop, on_lease_expired, e);
  /* Ticking at half the idle time bounds how late a collection is; a second
   * is plenty for ttl, which every touch of a queue also applies. */
  uint64_t tick = idle_ms / 2 < 1000 ? idle_ms / 2 : 1000;
  uv_timer_init(loop, &e->housekeeping);
  e->housekeeping.data = e;
  uv_timer_start(&e->housekeeping, on_housekeeping, tick ? tick : 1,
                 tick ? tick : 1);
  uv_unref((uv_handle_t *)&e->housekeeping);
}

/* Every change of a ring's contents goes through here, so the queue, tenant
 * and cell totals can never disagree with the rings. */
static void account(ephd_engine_t *e, ephd_queue_t *q, uint64_t depth_before,
                    uint64_t bytes_before, ephd_ring_t *r) {
  (void)e;
  uint64_t depth_after = ephd_ring_depth(r), bytes_after = r->bytes;
  q->depth = q->depth - depth_before + depth_after;
  q->bytes = q->bytes - bytes_before + bytes_after;
  uint64_t held = ephd_cost_messages(r);
  charge(q, held - r->charged);
  r->charged = held;
}

static void reclaim(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r) {
  uint64_t d = ephd_ring_depth(r), b = r->bytes;
  ephd_ring_reclaim(r);
  account(e, q, d, b, r);
}

static void free_lease(ephd_engine_t *e, ephd_lease_t *l, int in_heap) {
  if (in_heap) ephd_leases_remove(&e->leases, l);
  uncharge(l->queue, EPHD_COST_LEASE);
  free(l);
}

/* Takes a lease out of its cursor's map, by its seq. */
static ephd_lease_t *unmap_lease(ephd_queue_t *q, ephd_ring_t *r,
                                 uint32_t group, uint64_t seq) {
  ephd_cursor_t *c = &r->cursors[group];
  uint64_t before = ephd_cost_cursor_tables(c);
  ephd_lease_t *l = ephd_map_del(&c->leases, (const char *)&seq, 8);
  recharge_tables(q, c, before);
  return l;
}

/* Takes a settled or expired lease off its message's list. */
static void unlink_lease(ephd_ring_t *r, ephd_lease_t *l) {
  ephd_lease_t **pp = &ephd_ring_at(r, l->pos)->leases;
  while (*pp != l) pp = &(*pp)->next_on_msg;
  *pp = l->next_on_msg;
}

/* Leases on an evicted message die with it, so a late ack answers unknown
 * and pending counts stay true. */
static void evict_head(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r) {
  ephd_msg_t *m = ephd_ring_at(r, r->head);
  while (m->leases) {
    ephd_lease_t *l = m->leases;
    m->leases = l->next_on_msg;
    unmap_lease(q, r, l->group, l->seq);
    free_lease(e, l, 1);
  }
  uint64_t d = ephd_ring_depth(r), b = r->bytes;
  ephd_ring_evict_head(r);
  account(e, q, d, b, r);
}

/* Frees every lease of r; the caller charges the maps it frees. */
static void drop_leases(ephd_engine_t *e, ephd_ring_t *r) {
  for (uint32_t i = 0; i < r->ncursors; i++) {
    ephd_map_t *m = &r->cursors[i].leases;
    size_t pos = 0;
    ephd_lease_t *l;
    while ((l = ephd_map_next(m, &pos))) free_lease(e, l, 1);
    ephd_map_free(m);
  }
}

static void empty_remove(ephd_engine_t *e, ephd_tenant_t *t) {
  if (ephd_list_has(&e->empty, &t->empty_link))
    ephd_list_remove(&e->empty, &t->empty_link);
}

static void empty_append(ephd_engine_t *e, ephd_tenant_t *t, uint64_t now) {
  t->empty_ms = now;
  ephd_list_append(&e->empty, &t->empty_link);
}

static ephd_tenant_t *tenant_open(ephd_engine_t *e, const char *name,
                                  size_t len) {
  ephd_tenant_t *t = ephd_map_get(&e->tenants, name, len);
  if (t) return t;
  t = xcalloc(1, sizeof(*t));
  t->name = xstrndup(name, len);
  t->len = len;
  t->cell_bytes = &e->cell_bytes;
  t->born = ++e->tenants_born;
  ephd_map_init(&t->queues);
  ephd_map_put(&e->tenants, t->name, len, t);
  e->cell_bytes += ephd_cost_tenant(len);
  /* Opened for a queue or a reservation, which the caller adds at once:
   * never empty. */
  return t;
}

static void tenant_free(ephd_engine_t *e, ephd_tenant_t *t) {
  e->cell_bytes -= ephd_cost_tenant(t->len);
  ephd_map_free(&t->queues);
  free(t->name);
  free(t);
}

ephd_tenant_t *ephd_engine_tenant(ephd_engine_t *e, const char *name,
                                  size_t len) {
  return ephd_map_get(&e->tenants, name, len);
}

ephd_queue_t *ephd_engine_queue(ephd_engine_t *e, const char *tenant,
                                size_t tenant_len, const char *queue,
                                size_t queue_len) {
  ephd_tenant_t *t = ephd_map_get(&e->tenants, tenant, tenant_len);
  return t ? ephd_map_get(&t->queues, queue, queue_len) : NULL;
}

ephd_queue_t *ephd_engine_queue_open(ephd_engine_t *e, const char *tenant,
                                     size_t tenant_len, const char *queue,
                                     size_t queue_len) {
  ephd_tenant_t *t = tenant_open(e, tenant, tenant_len);
  ephd_queue_t *q = ephd_map_get(&t->queues, queue, queue_len);
  if (q) return q;
  empty_remove(e, t);
  q = xcalloc(1, sizeof(*q));
  q->name = xstrndup(queue, queue_len);
  q->name_len = queue_len;
  q->tenant = t;
  q->opts = e->defaults;
  q->active_ms = uv_now(e->loop);
  ephd_map_init(&q->rings_by_name);
  ephd_map_put(&t->queues, q->name, queue_len, q);
  ephd_list_append(&e->idle, &q->link);
  charge(q, ephd_cost_queue(queue_len));
  return q;
}

void ephd_engine_touch(ephd_engine_t *e, ephd_queue_t *q, uint64_t now_ms) {
  q->active_ms = now_ms;
  if (!q->declared && e->idle.tail != &q->link) {
    ephd_list_remove(&e->idle, &q->link);
    ephd_list_append(&e->idle, &q->link);
  }
}

static int parked(const ephd_queue_t *q) {
  for (uint32_t i = 0; i < q->ngroups; i++)
    if (ephd_gate_count(&q->groups[i]->gate)) return 1;
  return 0;
}

void ephd_engine_housekeep(ephd_engine_t *e, uint64_t now_ms) {
  for (ephd_node_t *n = e->declared.head; n; n = n->next)
    ephd_engine_expire(e, queue_of(n), now_ms);
  /* The idle list is ordered by activity, so the walk stops at the first
   * queue that is recent; one that is stale but busy goes to the back. */
  ephd_queue_t *q;
  size_t budget = e->idle.count;
  while ((q = queue_of(e->idle.head)) && budget-- &&
         q->active_ms + e->idle_ms <= now_ms) {
    ephd_engine_expire(e, q, now_ms);
    if (q->depth == 0 && !parked(q)) {
      ephd_engine_delete(e, q);
      e->collected++;
    } else
      ephd_engine_touch(e, q, now_ms);
  }
  /* A tenant without a queue has nothing parked and no footprint but its
   * record; its counters stopped when its last queue went, so the meter
   * (which ticks more often than forget_ms, see main.c) has seen them. */
  ephd_tenant_t *t;
  while ((t = tenant_of(e->empty.head)) &&
         t->empty_ms + e->forget_ms <= now_ms) {
    empty_remove(e, t);
    ephd_map_del(&e->tenants, t->name, t->len);
    tenant_free(e, t);
  }
}

ephd_queue_t *ephd_engine_declare(ephd_engine_t *e, const char *tenant,
                                  size_t tenant_len, const char *queue,
                                  size_t queue_len, const ephd_options_t *opts,
                                  uint64_t gen) {
  ephd_queue_t *q =
      ephd_engine_queue_open(e, tenant, tenant_len, queue, queue_len);
  if (!q->declared) {
    ephd_list_remove(&e->idle, &q->link);
    q->declared = 1;
    ephd_list_append(&e->declared, &q->link);
  }
  /* Lowering a bound below the occupancy evicts nothing: it refuses the
   * next arrival. */
  q->opts = *opts;
  q->decl_gen = gen;
  return q;
}

void ephd_engine_undeclare(ephd_engine_t *e, ephd_queue_t *q) {
  if (!q->declared) return;
  ephd_list_remove(&e->declared, &q->link);
  q->declared = 0;
  q->opts = e->defaults;
  ephd_list_append(&e->idle, &q->link);
}

void ephd_engine_sweep_declarations(ephd_engine_t *e, uint64_t gen) {
  ephd_queue_t *q = queue_of(e->declared.head);
  while (q) {
    ephd_queue_t *next = queue_of(q->link.next);
    if (q->decl_gen != gen) ephd_engine_undeclare(e, q);
    q = next;
  }
}

void ephd_engine_each_partition(const ephd_engine_t *e, ephd_partition_fn fn,
                                void *arg) {
  size_t tpos = 0;
  const ephd_tenant_t *t;
  while ((t = ephd_map_next(&e->tenants, &tpos))) {
    size_t qpos = 0;
    const ephd_queue_t *q;
    while ((q = ephd_map_next(&t->queues, &qpos)))
      for (uint32_t i = 0; i < q->nrings; i++)
        fn(arg, t->name, t->len, q->name, q->name_len, q->rings[i]->name,
           q->rings[i]->name_len);
  }
}

/* Most queues have one partition, and 100k inboxes each paying for a hash
 * table of one was a quarter of an idle inbox's memory: a queue with few
 * partitions is searched in its array, and the map is built only past
 * that. */
#define FEW_RINGS 8

ephd_ring_t *ephd_queue_ring(ephd_queue_t *q, const char *name, size_t len) {
  if (q->nrings > FEW_RINGS) return ephd_map_get(&q->rings_by_name, name, len);
  for (uint32_t i = 0; i < q->nrings; i++) {
    ephd_ring_t *r = q->rings[i];
    if (r->name_len == len && memcmp(r->name, name, len) == 0) return r;
  }
  return NULL;
}

/* Set while a move may still bring this broker hand-overs: a partition
 * first seen meanwhile may be one whose old owner is handing it over. */
static int hold_new_rings;

void ephd_engine_hold_new_rings(int on) { hold_new_rings = on; }

ephd_ring_t *ephd_queue_ring_open(ephd_queue_t *q, const char *name,
                                  size_t len) {
  ephd_ring_t *r = ephd_queue_ring(q, name, len);
  if (r) return r;
  r = ephd_ring_new(name, len);
  r->awaiting = (uint8_t)hold_new_rings;
  for (uint32_t i = 0; i < q->ngroups; i++) ephd_ring_add_cursor(r);
  charge(q, ephd_cost_ring(len) + q->ngroups * EPHD_COST_CURSOR);
  if (q->nrings == q->rings_cap) {
    q->rings_cap = q->rings_cap ? q->rings_cap * 2 : 1;
    q->rings = realloc(q->rings, q->rings_cap * sizeof(*q->rings));
    if (q->rings == NULL) abort();
  }
  q->rings[q->nrings++] = r;
  if (q->nrings == FEW_RINGS + 1) {
    for (uint32_t i = 0; i < q->nrings; i++)
      ephd_map_put(&q->rings_by_name, q->rings[i]->name, q->rings[i]->name_len,
                   q->rings[i]);
  } else if (q->nrings > FEW_RINGS + 1) {
    ephd_map_put(&q->rings_by_name, r->name, len, r);
  }
  return r;
}

int ephd_queue_group_find(const ephd_queue_t *q, const char *name, size_t len,
                          uint32_t *idx) {
  len = ephd_group_len(name, len);
  for (uint32_t i = 0; i < q->ngroups; i++) {
    if (q->groups[i]->len == len &&
        memcmp(q->groups[i]->name, name, len) == 0) {
      *idx = i;
      return 1;
    }
  }
  return 0;
}

int ephd_queue_full_of_partitions(const ephd_engine_t *e,
                                  const ephd_queue_t *q) {
  return e->max_partitions && q->nrings >= e->max_partitions;
}

static uint32_t named_groups(const ephd_queue_t *q) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < q->ngroups; i++)
    if (q->groups[i]->len) n++;
  return n;
}

/* Queue mode's shared cursor is not a named group and is never refused. */
int ephd_queue_full_of_groups(const ephd_engine_t *e, const ephd_queue_t *q) {
  return e->max_groups && named_groups(q) >= e->max_groups;
}

uint32_t ephd_queue_group_open(ephd_queue_t *q, const char *name, size_t len) {
  uint32_t idx;
  if (ephd_queue_group_find(q, name, len, &idx)) return idx;
  len = ephd_group_len(name, len);
  if (q->ngroups == q->groups_cap) {
    q->groups_cap = q->groups_cap ? q->groups_cap * 2 : 1;
    q->groups = realloc(q->groups, q->groups_cap * sizeof(*q->groups));
    if (q->groups == NULL) abort();
  }
  ephd_group_t *g = xcalloc(1, sizeof(*g) + len + 1);
  memcpy(g->name, name, len);
  g->len = len;
  ephd_gate_init(&g->gate, &q->tenant->parked);
  for (uint32_t i = 0; i < q->nrings; i++) ephd_ring_add_cursor(q->rings[i]);
  charge(q, ephd_cost_group(len) + q->nrings * EPHD_COST_CURSOR);
  q->groups[q->ngroups] = g;
  return q->ngroups++;
}

void ephd_engine_expire(ephd_engine_t *e, ephd_queue_t *q, uint64_t now_ms) {
  if (q->opts.ttl_s == 0) return;
  uint64_t ttl_ms = q->opts.ttl_s * 1000;
  for (uint32_t i = 0; i < q->nrings; i++) {
    ephd_ring_t *r = q->rings[i];
    while (r->head < r->tail &&
           now_ms - ephd_ring_at(r, r->head)->enqueued_ms >= ttl_ms) {
      evict_head(e, q, r);
      q->drops_ttl++;
      q->tenant->drops_ttl++;
    }
  }
}

static void wake(ephd_queue_t *q, ephd_ring_t *r) {
  for (uint32_t i = 0; i < q->ngroups; i++)
    ephd_gate_wake(&q->groups[i]->gate, r);
}

uint32_t ephd_engine_over_budget(const ephd_engine_t *e, const ephd_tenant_t *t,
                                 uint64_t grow, uint64_t cell_only,
                                 const ephd_tenant_limits_t *limits) {
  uint32_t refusals = 0;
  if (grow && limits && limits->max_bytes &&
      (t ? t->bytes : 0) + grow > limits->max_bytes)
    refusals |= EPHD_REFUSE_TENANT_BYTES;
  if ((grow || cell_only) &&
      e->cell_bytes + grow + cell_only > e->max_cell_bytes)
    refusals |= EPHD_REFUSE_CELL_BYTES;
  return refusals;
}

/* What creating the tenant (cell_only), queue, ring and group among these
 * that are new would charge. A new ring gets a cursor per existing group,
 * and a new group one per ring, the new ring included. */
static uint64_t names_cost(const ephd_tenant_t *t, size_t tenant_len,
                           const ephd_queue_t *q, size_t queue_len,
                           int new_ring, size_t partition_len, int new_group,
                           size_t group_len, uint64_t *cell_only) {
  uint64_t cost = 0, nrings = q ? q->nrings : 0, ngroups = q ? q->ngroups : 0;
  *cell_only = t ? 0 : ephd_cost_tenant(tenant_len);
  if (q == NULL) cost += ephd_cost_queue(queue_len);
  if (new_ring) {
    cost += ephd_cost_ring(partition_len) + ngroups * EPHD_COST_CURSOR;
    nrings++;
  }
  if (new_group) cost += ephd_cost_group(group_len) + nrings * EPHD_COST_CURSOR;
  return cost;
}

uint32_t ephd_engine_plan_names(const ephd_engine_t *e, const ephd_tenant_t *t,
                                size_t tenant_len, const ephd_queue_t *q,
                                size_t queue_len, int new_ring,
                                size_t partition_len, int new_group,
                                size_t group_len,
                                const ephd_tenant_limits_t *limits) {
  uint64_t cell_only;
  uint64_t grow = names_cost(t, tenant_len, q, queue_len, new_ring,
                             partition_len, new_group, group_len, &cell_only);
  return ephd_engine_over_budget(e, t, grow, cell_only, limits);
}

int ephd_tenant_full_of_queues(const ephd_tenant_t *t,
                               const ephd_tenant_limits_t *limits) {
  return t && limits && limits->max_queues &&
         t->queues.count + t->reserved_queues >= limits->max_queues;
}

uint32_t ephd_engine_plan_queue(const ephd_engine_t *e, const ephd_tenant_t *t,
                                size_t tenant_len, size_t queue_len,
                                const ephd_tenant_limits_t *limits) {
  uint32_t refusals =
      ephd_tenant_full_of_queues(t, limits) ? EPHD_REFUSE_TENANT_QUEUES : 0;
  return refusals | ephd_engine_plan_names(e, t, tenant_len, NULL, queue_len, 0,
                                           0, 0, 0, limits);
}

/* A reservation is charged to the tenant and the cell as the queue will be
 * (ephd_cost_queue), so the byte checks count it with no change of theirs. */
void ephd_engine_reserve_queue(ephd_engine_t *e, const char *tenant,
                               size_t tenant_len, size_t queue_len) {
  ephd_tenant_t *t = tenant_open(e, tenant, tenant_len);
  empty_remove(e, t);
  uint64_t cost = ephd_cost_queue(queue_len);
  t->reserved_queues++;
  t->reserved_bytes += cost;
  t->bytes += cost;
  e->cell_bytes += cost;
}

void ephd_engine_release_queue(ephd_engine_t *e, const char *tenant,
                               size_t tenant_len, size_t queue_len) {
  ephd_tenant_t *t = ephd_map_get(&e->tenants, tenant, tenant_len);
  uint64_t cost = ephd_cost_queue(queue_len);
  t->reserved_queues--;
  t->reserved_bytes -= cost;
  t->bytes -= cost;
  e->cell_bytes -= cost;
  if (t->queues.count == 0 && t->reserved_queues == 0)
    empty_append(e, t, uv_now(e->loop));
}

/* The queue's bounds, over its partitions on this broker (Queen sums them
 * too): the queue's running totals, so a push costs two compares however
 * many partitions it has. dropOldest evicts from the target partition's
 * head only, and only if that can make room: a push that would need
 * another partition's messages is refused whole, evicting nothing. */
static void plan_bounds(const ephd_queue_t *q, const ephd_options_t *o,
                        const ephd_ring_t *r, uint32_t n, uint64_t bytes,
                        ephd_push_plan_t *plan) {
  uint64_t depth = q ? q->depth : 0, have = q ? q->bytes : 0;
  if (bytes > o->max_bytes || n > o->max_length) {
    /* It could not fit into an empty queue: evicting would only lose data. */
    plan->refusals |= EPHD_REFUSE_QUEUE_TOO_SMALL;
  } else if (have + bytes > o->max_bytes || depth + n > o->max_length) {
    if (!o->drop_oldest) {
      plan->refusals |= EPHD_REFUSE_QUEUE_FULL;
    } else if (r == NULL || have - r->bytes + bytes > o->max_bytes ||
               depth - ephd_ring_depth(r) + n > o->max_length) {
      plan->refusals |= EPHD_REFUSE_QUEUE_CROWDED;
    } else {
      while (have - plan->evict_bytes + bytes > o->max_bytes ||
             depth - plan->evict + n > o->max_length) {
        plan->evict_bytes += ephd_ring_at(r, r->head + plan->evict)->len;
        plan->evict++;
      }
    }
  }
}

/* bounded 0: a hand-over's, which the queue's bounds never refuse. */
static void make_plan(const ephd_engine_t *e, const ephd_tenant_t *t,
                      size_t tenant_len, const ephd_queue_t *q,
                      size_t queue_len, const ephd_ring_t *r,
                      size_t partition_len, uint32_t n, uint64_t bytes,
                      const ephd_tenant_limits_t *limits, int bounded,
                      const ephd_options_t *created, ephd_push_plan_t *plan) {
  plan->refusals = 0;
  plan->evict = plan->evict_bytes = 0;
  if (bounded)
    plan_bounds(q,
                q         ? &q->opts
                : created ? created
                          : &e->defaults,
                r, n, bytes, plan);
  if (q && r == NULL && ephd_queue_full_of_partitions(e, q))
    plan->refusals |= EPHD_REFUSE_QUEUE_PARTS;
  if (q == NULL && ephd_tenant_full_of_queues(t, limits))
    plan->refusals |= EPHD_REFUSE_TENANT_QUEUES;
  /* The footprint it adds: new names, then messages net of evictions (the
   * slot array's growth is left to the next plan: at most one doubling). */
  uint64_t cell_only;
  uint64_t adds = names_cost(t, tenant_len, q, queue_len, r == NULL,
                             partition_len, 0, 0, &cell_only) +
                  bytes + n * EPHD_COST_MSG;
  uint64_t frees = plan->evict_bytes + plan->evict * EPHD_COST_MSG;
  plan->refusals |= ephd_engine_over_budget(
      e, t, adds > frees ? adds - frees : 0, cell_only, limits);
}

void ephd_engine_plan_push(const ephd_engine_t *e, const ephd_tenant_t *t,
                           size_t tenant_len, const ephd_queue_t *q,
                           size_t queue_len, const ephd_ring_t *r,
                           size_t partition_len, uint32_t n, uint64_t bytes,
                           const ephd_tenant_limits_t *limits,
                           const ephd_options_t *created,
                           ephd_push_plan_t *out) {
  make_plan(e, t, tenant_len, q, queue_len, r, partition_len, n, bytes, limits,
            1, created, out);
}

void ephd_engine_plan_accept(const ephd_engine_t *e, const ephd_tenant_t *t,
                             size_t tenant_len, const ephd_queue_t *q,
                             size_t queue_len, const ephd_ring_t *r,
                             size_t partition_len, uint32_t n, uint64_t bytes,
                             const ephd_tenant_limits_t *limits,
                             ephd_push_plan_t *out) {
  make_plan(e, t, tenant_len, q, queue_len, r, partition_len, n, bytes, limits,
            0, NULL, out);
}

void ephd_engine_push(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r,
                      const char *base, const ephd_span_t *payloads, uint32_t n,
                      const ephd_push_plan_t *plan, uint64_t now_ms) {
  for (uint64_t i = 0; i < plan->evict; i++) evict_head(e, q, r);
  q->drops_bounds += plan->evict;
  q->tenant->drops_bounds += plan->evict;
  uint64_t d = ephd_ring_depth(r), b = r->bytes;
  for (uint32_t i = 0; i < n; i++)
    ephd_ring_append(r, now_ms, base + payloads[i].off, payloads[i].len);
  account(e, q, d, b, r);
  q->tenant->pushed += n;
  wake(q, r);
}

/* A redelivery for c, holding its message. */
static void hold_redo(ephd_ring_t *r, ephd_cursor_t *c, uint64_t pos,
                      uint32_t attempts) {
  ephd_ring_redeliver(r, c, pos, attempts);
  ephd_ring_at(r, pos)->holds++;
}

void ephd_engine_accept(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r,
                        const ephd_transfer_t *t, uint64_t now_ms) {
  uint64_t d = ephd_ring_depth(r), b = r->bytes, base = r->tail;
  uint64_t limit = q->opts.retry_limit ? q->opts.retry_limit : 1;
  for (uint32_t i = 0; i < t->nmsgs; i++) {
    const ephd_transfer_msg_t *m = &t->msgs[i];
    uint64_t age = m->age_ms < now_ms ? m->age_ms : now_ms;
    ephd_ring_append(r, now_ms - age, t->base + m->off, m->len);
  }
  account(e, q, d, b, r);
  for (uint32_t i = 0; i < t->ngroups; i++) {
    const ephd_transfer_group_t *tg = &t->groups[i];
    const char *name = t->base + tg->name_off;
    uint32_t g;
    if (!ephd_queue_group_find(q, name, tg->name_len, &g)) {
      if (tg->name_len && ephd_queue_full_of_groups(e, q)) continue;
      g = ephd_queue_group_open(q, name, tg->name_len);
    }
    ephd_cursor_t *c = &r->cursors[g];
    uint64_t tables = ephd_cost_cursor_tables(c);
    for (uint64_t pos = c->next < r->head ? r->head : c->next; pos < base;
         pos++)
      hold_redo(r, c, pos, 0);
    c->next = base + tg->next;
    for (uint32_t k = 0; k < tg->nredo; k++) {
      const ephd_transfer_redo_t *rd = &t->redo[tg->redo_first + k];
      /* A lease on its last allowed delivery travels with attempts at the
       * limit: dropped for the group, as its expiry would have. */
      if (rd->attempts >= limit) {
        q->drops_retry++;
        q->tenant->drops_retry++;
        continue;
      }
      hold_redo(r, c, base + rd->index, rd->attempts);
    }
    recharge_tables(q, c, tables);
  }
  /* Its groups are known now: what they are all past can go. */
  r->awaiting = 0;
  reclaim(e, q, r);
  wake(q, r);
}

void ephd_engine_release(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r) {
  r->awaiting = 0;
  reclaim(e, q, r);
}

static void write_delivery(ephd_engine_t *e, const ephd_ring_t *r,
                           const ephd_msg_t *m, uint64_t seq, uint32_t attempts,
                           ephd_buf_t *out) {
  ephd_buf_appends(out, "{\"id\":\"");
  ephd_id_write(out, e->epoch, r->name, r->name_len, seq);
  ephd_buf_appends(out, "\",\"partition\":");
  ephd_json_write_string(out, r->name, r->name_len);
  ephd_buf_appends(out, ",\"attempts\":");
  ephd_buf_append_u64(out, attempts);
  ephd_buf_appends(out, ",\"payload\":");
  ephd_buf_append(out, m->payload, m->len);
  ephd_buf_append(out, "}", 1);
}

static uint32_t take(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r,
                     uint32_t group, uint32_t want, int auto_ack,
                     uint64_t now_ms, ephd_buf_t *out, size_t stop_len,
                     uint32_t already) {
  ephd_cursor_t *c = &r->cursors[group];
  uint64_t tables = ephd_cost_cursor_tables(c);
  uint32_t got = 0;
  uint64_t pos;
  uint32_t attempts;
  int redo;
  while (got < want && (already + got == 0 || out->len < stop_len) &&
         ephd_ring_take(r, c, &pos, &attempts, &redo)) {
    ephd_msg_t *m = ephd_ring_at(r, pos);
    uint64_t seq = e->next_seq++;
    if (already + got) ephd_buf_append(out, ",", 1);
    write_delivery(e, r, m, seq, attempts, out);
    got++;
    q->tenant->delivered++;
    if (auto_ack) {
      if (redo) m->holds--;
      continue;
    }
    ephd_lease_t *l = xcalloc(1, sizeof(*l));
    l->seq = seq;
    l->pos = pos;
    l->next_on_msg = m->leases;
    m->leases = l;
    l->deadline_ms = now_ms + q->opts.lease_s * 1000;
    l->attempts = attempts;
    l->group = group;
    l->ring = r;
    l->queue = q;
    ephd_map_put(&c->leases, (const char *)&l->seq, 8, l);
    ephd_leases_add(&e->leases, l);
    charge(q, EPHD_COST_LEASE);
    if (!redo) m->holds++;
  }
  recharge_tables(q, c, tables);
  if (auto_ack && got) reclaim(e, q, r);
  return got;
}

uint32_t ephd_engine_pop(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r,
                         uint32_t group, uint32_t batch, int auto_ack,
                         uint64_t now_ms, ephd_buf_t *out, size_t max_bytes) {
  ephd_engine_expire(e, q, now_ms);
  size_t stop_len =
      max_bytes < SIZE_MAX - out->len ? out->len + max_bytes : SIZE_MAX;
  if (r) return take(e, q, r, group, batch, auto_ack, now_ms, out, stop_len, 0);
  uint32_t got = 0;
  uint32_t n = q->nrings;
  for (uint32_t k = 0; k < n && got < batch && out->len < stop_len; k++) {
    ephd_ring_t *ring = q->rings[(q->rr + k) % n];
    got += take(e, q, ring, group, batch - got, auto_ack, now_ms, out, stop_len,
                got);
  }
  if (n) q->rr = (q->rr + 1) % n;
  return got;
}

uint64_t ephd_engine_available(ephd_queue_t *q, ephd_ring_t *r, uint32_t group,
                               uint64_t cap) {
  if (r) return ephd_ring_available(r, &r->cursors[group]);
  uint64_t n = 0;
  for (uint32_t i = 0; i < q->nrings && n < cap; i++)
    n += ephd_ring_available(q->rings[i], &q->rings[i]->cursors[group]);
  return n;
}

int ephd_engine_would_deliver(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r,
                              int new_ring, int new_group, uint32_t group,
                              uint64_t now_ms) {
  if (q == NULL || new_ring) return 0;
  ephd_engine_expire(e, q, now_ms);
  if (new_group) return (r ? ephd_ring_depth(r) : q->depth) > 0;
  return ephd_engine_ready(q, r, group);
}

void ephd_engine_wake_group(ephd_queue_t *q, ephd_ring_t *r, uint32_t group) {
  ephd_gate_t *g = &q->groups[group]->gate;
  if (r) {
    ephd_gate_wake(g, r);
    return;
  }
  for (uint32_t i = 0; i < q->nrings && ephd_gate_count(g); i++)
    ephd_gate_wake(g, q->rings[i]);
}

/* A ring's readiness for a group, its cursor's tables recharged: the
 * answer may shrink the redelivery FIFO. */
static int ring_ready(ephd_queue_t *q, ephd_ring_t *r, uint32_t group) {
  ephd_cursor_t *c = &r->cursors[group];
  uint64_t tables = ephd_cost_cursor_tables(c);
  int ready = ephd_ring_ready(r, c);
  recharge_tables(q, c, tables);
  return ready;
}

int ephd_engine_ready(ephd_queue_t *q, ephd_ring_t *r, uint32_t group) {
  if (r) return ring_ready(q, r, group);
  for (uint32_t i = 0; i < q->nrings; i++)
    if (ring_ready(q, q->rings[i], group)) return 1;
  return 0;
}

/* A failed, retried or expired delivery: redeliver with attempts + 1, or
 * drop it for this group once it has had its retryLimit deliveries. The lease
 * is already out of the heap and the cursor's map. */
static ephd_outcome_t fail_delivery(ephd_engine_t *e, ephd_lease_t *l) {
  ephd_queue_t *q = l->queue;
  ephd_ring_t *r = l->ring;
  uint64_t limit = q->opts.retry_limit ? q->opts.retry_limit : 1;
  uint32_t attempts = l->attempts + 1;
  uint64_t pos = l->pos;
  uint32_t group = l->group;
  free_lease(e, l, 0);
  if (attempts >= limit) {
    ephd_ring_at(r, pos)->holds--;
    q->drops_retry++;
    q->tenant->drops_retry++;
    reclaim(e, q, r);
    return EPHD_OUTCOME_ACKED;
  }
  ephd_cursor_t *c = &r->cursors[group];
  uint64_t tables = ephd_cost_cursor_tables(c);
  ephd_ring_redeliver(r, c, pos, attempts);
  recharge_tables(q, c, tables);
  ephd_gate_wake(&q->groups[group]->gate, r);
  return EPHD_OUTCOME_REDELIVERED;
}

static void on_lease_expired(ephd_lease_t *l, void *data) {
  ephd_ring_t *r = l->ring;
  unmap_lease(l->queue, r, l->group, l->seq);
  unlink_lease(r, l);
  fail_delivery(data, l);
}

ephd_outcome_t ephd_engine_ack(ephd_engine_t *e, ephd_queue_t *q,
                               uint32_t group, const char *id, size_t id_len,
                               ephd_ack_status_t status, uint64_t now_ms) {
  (void)now_ms;
  ephd_id_t parsed;
  if (ephd_id_parse(id, id_len, &parsed) < 0) return EPHD_OUTCOME_UNKNOWN;
  if (parsed.epoch != e->epoch) return EPHD_OUTCOME_STALE;
  if (q == NULL || group >= q->ngroups) return EPHD_OUTCOME_UNKNOWN;
  ephd_ring_t *r = ephd_queue_ring(q, parsed.partition, parsed.partition_len);
  if (r == NULL) return EPHD_OUTCOME_UNKNOWN;
  ephd_lease_t *l = unmap_lease(q, r, group, parsed.seq);
  if (l == NULL)
    return parsed.seq < r->fence ? EPHD_OUTCOME_STALE : EPHD_OUTCOME_UNKNOWN;
  ephd_leases_remove(&e->leases, l);
  unlink_lease(r, l);
  if (status != EPHD_ACK_COMPLETED) return fail_delivery(e, l);
  ephd_ring_at(r, l->pos)->holds--;
  free_lease(e, l, 0);
  reclaim(e, q, r);
  e->acked++;
  return EPHD_OUTCOME_ACKED;
}

static uint64_t clear_ring(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r) {
  uint64_t d = ephd_ring_depth(r), b = r->bytes, tables = ring_tables(r);
  drop_leases(e, r);
  uint64_t dropped = ephd_ring_clear(r);
  account(e, q, d, b, r);
  charge(q, ring_tables(r) - tables);
  return dropped;
}

uint64_t ephd_engine_reset(ephd_engine_t *e, ephd_queue_t *q) {
  uint64_t dropped = 0;
  for (uint32_t i = 0; i < q->nrings; i++)
    dropped += clear_ring(e, q, q->rings[i]);
  return dropped;
}

uint64_t ephd_engine_wipe(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r,
                          uint64_t *bytes) {
  *bytes = r->bytes;
  r->fence = e->next_seq;
  return clear_ring(e, q, r);
}

void ephd_engine_delete(ephd_engine_t *e, ephd_queue_t *q) {
  for (uint32_t i = 0; i < q->ngroups; i++)
    ephd_gate_flush(&q->groups[i]->gate);
  ephd_engine_reset(e, q);
  for (uint32_t i = 0; i < q->nrings; i++) ephd_ring_free(q->rings[i]);
  for (uint32_t i = 0; i < q->ngroups; i++) free(q->groups[i]);
  ephd_tenant_t *t = q->tenant;
  uncharge(q, q->footprint);
  ephd_list_remove(list_of(e, q), &q->link);
  ephd_map_del(&t->queues, q->name, q->name_len);
  ephd_map_free(&q->rings_by_name);
  free(q->rings);
  free(q->groups);
  free(q->name);
  free(q);
  if (t->queues.count == 0) {
    ephd_map_free(&t->queues);
    if (t->reserved_queues == 0) empty_append(e, t, uv_now(e->loop));
  }
}

void ephd_engine_close(ephd_engine_t *e) {
  /* Every queue is on one of the two lists. Restarting a scan of a tenant's
   * map after each delete was quadratic: 100k inboxes took seconds to stop. */
  while (e->idle.head) ephd_engine_delete(e, queue_of(e->idle.head));
  while (e->declared.head) ephd_engine_delete(e, queue_of(e->declared.head));
  ephd_tenant_t *t;
  size_t pos = 0;
  while ((t = ephd_map_next(&e->tenants, &pos))) tenant_free(e, t);
  ephd_map_free(&e->tenants);
  ephd_leases_close(&e->leases);
  uv_close((uv_handle_t *)&e->housekeeping, NULL);
}

/* --- what callers read ------------------------------------------------- */

uint32_t ephd_engine_epoch(const ephd_engine_t *e) { return e->epoch; }

uint64_t ephd_engine_collected(const ephd_engine_t *e) { return e->collected; }

uint64_t ephd_engine_cell_bytes(const ephd_engine_t *e) {
  return e->cell_bytes;
}

void ephd_engine_totals(const ephd_engine_t *e, ephd_engine_totals_t *out) {
  memset(out, 0, sizeof(*out));
  size_t pos = 0;
  const ephd_tenant_t *t;
  while ((t = ephd_map_next(&e->tenants, &pos))) {
    out->pushed += t->pushed;
    out->delivered += t->delivered;
    out->parked += t->parked;
    out->queues += t->queues.count;
    out->dropped_bounds += t->drops_bounds;
    out->dropped_ttl += t->drops_ttl;
    out->dropped_retry += t->drops_retry;
  }
  out->acked = e->acked;
  out->tenants = e->tenants.count;
  out->cell_bytes = e->cell_bytes;
}

ephd_tenant_t *ephd_engine_next_tenant(const ephd_engine_t *e, size_t *pos) {
  return ephd_map_next(&e->tenants, pos);
}

const char *ephd_tenant_name(const ephd_tenant_t *t, size_t *len) {
  *len = t->len;
  return t->name;
}

void ephd_tenant_stats_of(const ephd_tenant_t *t, ephd_tenant_stats_t *out) {
  out->bytes = t->bytes;
  out->queues = t->queues.count;
  out->parked = t->parked;
  out->pushed = t->pushed;
  out->delivered = t->delivered;
  out->dropped_bounds = t->drops_bounds;
  out->dropped_ttl = t->drops_ttl;
  out->dropped_retry = t->drops_retry;
  out->born = t->born;
}

ephd_queue_t *ephd_tenant_queue(const ephd_tenant_t *t, const char *name,
                                size_t len) {
  return ephd_map_get(&t->queues, name, len);
}

ephd_queue_t *ephd_tenant_next_queue(const ephd_tenant_t *t, size_t *pos) {
  return ephd_map_next(&t->queues, pos);
}

void ephd_queue_info(const ephd_queue_t *q, ephd_queue_info_t *out) {
  out->declared = q->declared;
  out->depth = q->depth;
  out->bytes = q->bytes;
  out->partitions = q->nrings;
  out->groups = q->ngroups;
  out->dropped_bounds = q->drops_bounds;
  out->dropped_ttl = q->drops_ttl;
  out->dropped_retry = q->drops_retry;
  /* A walk of its groups (at most QUEEN_EPHEMERAL_MAX_GROUPS and queue
   * mode), for the status reads only: nothing on the hot path counts. */
  out->parked = 0;
  for (uint32_t i = 0; i < q->ngroups; i++)
    out->parked += ephd_gate_count(&q->groups[i]->gate);
}

/* A partition's backlog with no group named: the worst named group's
 * (Queen's), else queue mode's, else every message held. */
static uint64_t worst_backlog(const ephd_queue_t *q, const ephd_ring_t *r) {
  uint64_t worst = 0;
  int named = 0, shared = -1;
  for (uint32_t g = 0; g < q->ngroups; g++) {
    if (q->groups[g]->len == 0) {
      shared = (int)g;
      continue;
    }
    uint64_t n = ephd_ring_available(r, &r->cursors[g]);
    if (!named || n > worst) worst = n;
    named = 1;
  }
  if (named) return worst;
  if (shared >= 0) return ephd_ring_available(r, &r->cursors[shared]);
  return ephd_ring_depth(r);
}

int ephd_queue_next_partition(const ephd_queue_t *q, uint32_t *pos,
                              uint32_t group, ephd_partition_info_t *out) {
  if (*pos >= q->nrings) return 0;
  const ephd_ring_t *r = q->rings[(*pos)++];
  out->name = r->name;
  out->name_len = r->name_len;
  if (group == EPHD_DEPTH_WORST)
    out->pending = worst_backlog(q, r);
  else if (group == EPHD_DEPTH_NEW)
    out->pending = ephd_ring_depth(r);
  else
    out->pending = ephd_ring_available(r, &r->cursors[group]);
  out->bytes = r->bytes;
  return 1;
}

int ephd_queue_next_group(const ephd_queue_t *q, uint32_t *pos,
                          ephd_group_info_t *out) {
  if (*pos >= q->ngroups) return 0;
  uint32_t g = (*pos)++;
  out->name = q->groups[g]->len ? q->groups[g]->name : EPHD_QUEUE_MODE;
  out->name_len =
      q->groups[g]->len ? q->groups[g]->len : sizeof(EPHD_QUEUE_MODE) - 1;
  out->pending = out->skipped = 0;
  for (uint32_t i = 0; i < q->nrings; i++) {
    out->pending += ephd_ring_available(q->rings[i], &q->rings[i]->cursors[g]);
    out->skipped += q->rings[i]->cursors[g].skipped;
  }
  return 1;
}
