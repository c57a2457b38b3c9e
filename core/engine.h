/* The engine: tenants -> queues -> partition rings, groups and their gates,
 * leases, the nested byte budgets and the broker's epoch. It knows nothing of
 * HTTP; the commands turn its results into answers. Every function takes `now`
 * from the caller so tests can drive time. */
#ifndef EPHD_ENGINE_H
#define EPHD_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <uv.h>

#include "buf.h"
#include "ffi.h"
#include "gate.h"
#include "lease.h"
#include "list.h"
#include "map.h"
#include "ring.h"

/* Each group is its own allocation, never moved: parked waiters point at its
 * gate while pops name new groups. */
typedef struct {
  size_t len;
  ephd_gate_t gate;
  char name[]; /* "" is queue mode: the one shared cursor */
} ephd_group_t;

/* Queue mode's name where a group is named (Queen's): a pop, ack or depth
 * read naming it reaches the shared cursor, and the depth read lists the
 * shared cursor by it. */
#define EPHD_QUEUE_MODE "__QUEUE_MODE__"

/* A group's name as the engine keeps it: EPHD_QUEUE_MODE is "". */
static inline size_t ephd_group_len(const char *name, size_t len) {
  return len == sizeof(EPHD_QUEUE_MODE) - 1 &&
                 memcmp(name, EPHD_QUEUE_MODE, len) == 0
             ? 0
             : len;
}

struct ephd_tenant;

typedef struct ephd_queue ephd_queue_t;

struct ephd_queue {
  char *name;
  size_t name_len;
  struct ephd_tenant *tenant;
  int declared;
  uint64_t decl_gen;   /* the load that last applied its declaration */
  ephd_node_t link;    /* implicit: in the idle list; declared: declared list */
  uint64_t active_ms;  /* last push, pop or ack */
  ephd_options_t opts; /* in force */
  ephd_map_t rings_by_name;
  ephd_ring_t **rings;
  uint32_t nrings, rings_cap;
  uint32_t rr; /* where an any-partition pop starts, for fairness */
  ephd_group_t **groups;
  uint32_t ngroups, groups_cap;
  uint64_t depth, bytes; /* messages and their payload bytes */
  uint64_t footprint;    /* what it holds, in the costs below */
  uint64_t drops_bounds, drops_ttl, drops_retry;
};

/* Tenants outlive their queues, so their counters do too, until a tenant
 * has held no queue for the engine's forget_ms: then it is forgotten, and
 * seen again it starts from zero under a new `born`. */
typedef struct ephd_tenant {
  char *name;
  size_t len;
  ephd_map_t queues;
  uint64_t bytes;       /* the footprint of its queues and reservations, in the
                           costs below */
  uint64_t *cell_bytes; /* the engine's, charged with it */
  uint64_t born;        /* the engine's count of tenant records, at creation */
  uint64_t empty_ms;    /* when its last queue went */
  ephd_node_t empty_link; /* in the engine's empty list while it has no queue */
  /* Configures of new queues whose writes are in flight: their places in
   * the queue allowance and what they will create, counted by every check
   * until each write completes. A tenant holding one is never forgotten. */
  uint32_t reserved_queues;
  uint64_t reserved_bytes;
  uint64_t parked;
  uint64_t pushed;
  uint64_t delivered;
  uint64_t drops_bounds, drops_ttl, drops_retry;
} ephd_tenant_t;

/* The partition of a push that names none (Queen's). */
#define EPHD_DEFAULT_PARTITION "Default"

typedef enum {
  EPHD_ACK_COMPLETED,
  EPHD_ACK_FAILED,
  EPHD_ACK_RETRY
} ephd_ack_status_t;

typedef enum {
  EPHD_OUTCOME_ACKED,
  EPHD_OUTCOME_REDELIVERED,
  EPHD_OUTCOME_STALE,
  EPHD_OUTCOME_UNKNOWN
} ephd_outcome_t;

typedef struct {
  uint32_t epoch;
  uint64_t next_seq; /* per delivery: never repeats within an epoch */
  ephd_map_t tenants;
  uint64_t tenants_born; /* tenant records ever created */
  /* Tenants without a queue, longest first: forgotten after forget_ms. */
  ephd_list_t empty;
  uint64_t forget_ms;
  uint64_t cell_bytes; /* the footprint of everything, in the costs below */
  uint64_t max_cell_bytes;
  ephd_options_t defaults;
  ephd_leases_t leases;
  ephd_list_t idle;     /* implicit queues, least recently active first */
  ephd_list_t declared; /* declared queues */
  uint64_t idle_ms;     /* implicit queues empty this long are collected */
  uv_loop_t *loop;
  uv_timer_t housekeeping;
  uint64_t collected; /* implicit queues collected, ever */
  /* Caps on what a queue remembers: every partition and group name is kept
   * (a ring per partition, a cursor per group in each), so unbounded names
   * would be unbounded memory. 0: no cap. */
  uint32_t max_partitions;
  uint32_t max_groups;
  uint64_t acked; /* leases settled completed, ever */
  /* A push or pop creating an implicit queue asks Lua for its options
   * first (ephd_ffi_queue_options). */
  int ask_options;
} ephd_engine_t;

/* What the engine charges for what it holds: honest estimates of the heap
 * each structure takes, so the tenant's and the cell's byte budgets bound
 * memory rather than payload alone. Every allocation pays malloc's header
 * and rounding at worst (glibc: 8 bytes, then up to 16 more): a million
 * one-byte messages are within a few percent of what they take, larger
 * ones a little over. Arrays that double are charged at twice their use. A
 * message pays its header, its allocation and its payload; its ring's slot
 * array is charged as it is (slots x 8), and so are a cursor's lease map and
 * redelivery FIFO, which grow and shrink with what they hold. Names are
 * charged at their length. Leases are charged while they live, but never
 * refused: they are deliveries of messages already paid for, and the next
 * push or new name is what the budget refuses. docs/architecture.md has the
 * table. */
#define EPHD_ALLOC_OVERHEAD 24
#define EPHD_COST_MSG (sizeof(ephd_msg_t) + EPHD_ALLOC_OVERHEAD)
#define EPHD_COST_SLOT (sizeof(ephd_msg_t *))
#define EPHD_COST_CURSOR (sizeof(ephd_cursor_t))
#define EPHD_COST_LEASE                         \
  (sizeof(ephd_lease_t) + EPHD_ALLOC_OVERHEAD + \
   4 * sizeof(ephd_lease_t *) /* its place in the heap, at a quarter full */)

/* A cursor's lease map table and redelivery array, at their capacity: its
 * busiest moment is paid for until the structure shrinks back. */
static inline uint64_t ephd_cost_cursor_tables(const ephd_cursor_t *c) {
  uint64_t slots = ephd_map_capacity(&c->leases);
  return (slots ? slots * sizeof(ephd_map_slot_t) + EPHD_ALLOC_OVERHEAD : 0) +
         (c->redo_cap ? (uint64_t)c->redo_cap * sizeof(ephd_redelivery_t) +
                            EPHD_ALLOC_OVERHEAD
                      : 0);
}

/* A tenant's record and its name, its slot in the engine's map, and its
 * queue map's first table: the cell's, as nothing of the tenant's own. */
static inline uint64_t ephd_cost_tenant(size_t name_len) {
  return sizeof(ephd_tenant_t) + name_len + 1 + 2 * EPHD_ALLOC_OVERHEAD +
         2 * sizeof(ephd_map_slot_t);
}
/* A queue's record and name, and its slot in the tenant's map. */
static inline uint64_t ephd_cost_queue(size_t name_len) {
  return sizeof(ephd_queue_t) + name_len + 1 + 2 * EPHD_ALLOC_OVERHEAD +
         2 * sizeof(ephd_map_slot_t);
}
/* A partition's ring and name, its places in the queue's array and map,
 * and its cursor array; one cursor per group comes on top. */
static inline uint64_t ephd_cost_ring(size_t name_len) {
  return sizeof(ephd_ring_t) + name_len + 1 + 3 * EPHD_ALLOC_OVERHEAD +
         2 * sizeof(ephd_ring_t *) + 2 * sizeof(ephd_map_slot_t);
}
/* A group and its name, and its place in the queue's array; one cursor
 * per partition comes on top. */
static inline uint64_t ephd_cost_group(size_t name_len) {
  return sizeof(ephd_group_t) + name_len + 1 + EPHD_ALLOC_OVERHEAD +
         2 * sizeof(ephd_group_t *);
}
/* A ring's messages and slot array. */
static inline uint64_t ephd_cost_messages(const ephd_ring_t *r) {
  return r->bytes + ephd_ring_depth(r) * EPHD_COST_MSG +
         (r->cap ? r->cap * EPHD_COST_SLOT + EPHD_ALLOC_OVERHEAD : 0);
}

typedef struct {
  uint32_t epoch;
  ephd_options_t defaults; /* what an implicit queue runs with */
  uint64_t max_cell_bytes;
  uint64_t idle_ms;   /* implicit queues empty this long are collected */
  uint64_t forget_ms; /* tenants without a queue this long are forgotten;
                         0: idle_ms */
  uint32_t max_partitions, max_groups; /* per queue; 0: no cap */
} ephd_engine_config_t;

void ephd_engine_init(ephd_engine_t *e, uv_loop_t *loop,
                      const ephd_engine_config_t *config);
/* Frees everything; waiters must have been flushed first. */
void ephd_engine_close(ephd_engine_t *e);

ephd_queue_t *ephd_engine_queue(ephd_engine_t *e, const char *tenant,
                                size_t tenant_len, const char *queue,
                                size_t queue_len);
/* Finds or creates an implicit queue. */
ephd_queue_t *ephd_engine_queue_open(ephd_engine_t *e, const char *tenant,
                                     size_t tenant_len, const char *queue,
                                     size_t queue_len);
ephd_ring_t *ephd_queue_ring(ephd_queue_t *q, const char *name, size_t len);
ephd_ring_t *ephd_queue_ring_open(ephd_queue_t *q, const char *name,
                                  size_t len);
/* Group index by name, created at every ring's head on first use. */
uint32_t ephd_queue_group_open(ephd_queue_t *q, const char *name, size_t len);
int ephd_queue_group_find(const ephd_queue_t *q, const char *name, size_t len,
                          uint32_t *idx);
/* Whether naming a new partition or a new group would pass the caps. */
int ephd_queue_full_of_partitions(const ephd_engine_t *e,
                                  const ephd_queue_t *q);
int ephd_queue_full_of_groups(const ephd_engine_t *e, const ephd_queue_t *q);

/* Drops messages older than ttl from the heads of q's rings. */
void ephd_engine_expire(ephd_engine_t *e, ephd_queue_t *q, uint64_t now_ms);
/* Marks q as used now: an implicit queue's idle clock restarts. */
void ephd_engine_touch(ephd_engine_t *e, ephd_queue_t *q, uint64_t now_ms);
/* The periodic sweep: ttl drops on declared queues with a ttl, collection
 * of implicit queues empty, unpolled and unparked for idle_ms, and
 * forgetting tenants without a queue for forget_ms. Walks the idle and
 * empty lists only as far as their stale heads. */
void ephd_engine_housekeep(ephd_engine_t *e, uint64_t now_ms);
/* Declares q (or creates it declared) with opts, stamped with load gen. */
ephd_queue_t *ephd_engine_declare(ephd_engine_t *e, const char *tenant,
                                  size_t tenant_len, const char *queue,
                                  size_t queue_len, const ephd_options_t *opts,
                                  uint64_t gen);
/* Back to implicit with the broker's defaults; contents are kept. */
void ephd_engine_undeclare(ephd_engine_t *e, ephd_queue_t *q);
/* Undeclares every queue a load of generation gen did not declare. */
void ephd_engine_sweep_declarations(ephd_engine_t *e, uint64_t gen);
/* Calls fn for every partition ring held, with its tenant's, queue's and
 * partition's names (valid during the call); fn must not change the
 * engine. O(partitions): for status reads, never the hot path. */
typedef void (*ephd_partition_fn)(void *arg, const char *tenant,
                                  size_t tenant_len, const char *queue,
                                  size_t queue_len, const char *partition,
                                  size_t partition_len);
void ephd_engine_each_partition(const ephd_engine_t *e, ephd_partition_fn fn,
                                void *arg);

ephd_tenant_t *ephd_engine_tenant(ephd_engine_t *e, const char *name,
                                  size_t len);

/* The budgets that growing t's footprint by grow, and the cell's by grow
 * plus cell_only (a new tenant's record), would break. Growing by nothing
 * is never refused. */
uint32_t ephd_engine_over_budget(const ephd_engine_t *e, const ephd_tenant_t *t,
                                 uint64_t grow, uint64_t cell_only,
                                 const ephd_tenant_limits_t *limits);
/* Whether t's queue allowance is used up, by its queues and the ones its
 * configures in flight will create. */
int ephd_tenant_full_of_queues(const ephd_tenant_t *t,
                               const ephd_tenant_limits_t *limits);
/* The refusals a configure creating a new queue meets: the queue allowance,
 * then the budgets for what it would create. */
uint32_t ephd_engine_plan_queue(const ephd_engine_t *e, const ephd_tenant_t *t,
                                size_t tenant_len, size_t queue_len,
                                const ephd_tenant_limits_t *limits);
/* A configure that passed ephd_engine_plan_queue reserves what it will
 * create before its database write, and releases it when the write
 * completes or fails (then declaring, if it succeeded): until then the
 * queue counts in its tenant's allowance and its cost in the budgets. The
 * tenant's record is created for it if needed. */
void ephd_engine_reserve_queue(ephd_engine_t *e, const char *tenant,
                               size_t tenant_len, size_t queue_len);
void ephd_engine_release_queue(ephd_engine_t *e, const char *tenant,
                               size_t tenant_len, size_t queue_len);
/* What a pop or a declaration naming these would create, and the budgets
 * that would refuse it: t and q NULL when they do not exist yet, new_ring
 * and new_group when the partition or group is new. */
uint32_t ephd_engine_plan_names(const ephd_engine_t *e, const ephd_tenant_t *t,
                                size_t tenant_len, const ephd_queue_t *q,
                                size_t queue_len, int new_ring,
                                size_t partition_len, int new_group,
                                size_t group_len,
                                const ephd_tenant_limits_t *limits);

/* A push is planned whole before anything changes: every budget that would
 * refuse it, and what dropOldest would evict. The queue's maxBytes and
 * maxLength bound the queue, over its partitions on this broker;
 * dropOldest evicts from r's head only, and a push that could fit only by
 * evicting another partition's messages is refused whole
 * (EPHD_REFUSE_QUEUE_CROWDED). t, q and r may be NULL for a
 * tenant, queue or partition the push would create (named by the lengths,
 * for their cost); a queue it creates runs with created (the policy's
 * queue_options), or the broker's defaults when that is NULL. */
typedef struct {
  uint32_t refusals;
  uint64_t evict;
  uint64_t evict_bytes;
} ephd_push_plan_t;
void ephd_engine_plan_push(const ephd_engine_t *e, const ephd_tenant_t *t,
                           size_t tenant_len, const ephd_queue_t *q,
                           size_t queue_len, const ephd_ring_t *r,
                           size_t partition_len, uint32_t n, uint64_t bytes,
                           const ephd_tenant_limits_t *limits,
                           const ephd_options_t *created,
                           ephd_push_plan_t *plan);
/* Carries out a plan without refusals; payloads[i] is a span of base. */
typedef struct {
  uint32_t off, len;
} ephd_span_t;
void ephd_engine_push(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r,
                      const char *base, const ephd_span_t *payloads, uint32_t n,
                      const ephd_push_plan_t *plan, uint64_t now_ms);

/* A hand-over's plan: the budgets only. The queue's bounds never refuse
 * nor evict for a partition adopted from another broker: its messages
 * were admitted under its old owner's share of the queue, and refusing
 * them here would lose them (the bound then refuses the next push). */
void ephd_engine_plan_accept(const ephd_engine_t *e, const ephd_tenant_t *t,
                             size_t tenant_len, const ephd_queue_t *q,
                             size_t queue_len, const ephd_ring_t *r,
                             size_t partition_len, uint32_t n, uint64_t bytes,
                             const ephd_tenant_limits_t *limits,
                             ephd_push_plan_t *plan);

/* A partition handed over by its old owner (transfer.h), merged into r
 * after ephd_engine_plan_accept found no refusal. Its messages go after
 * what r holds. Each group it names keeps its place: what it had been given on
 * the old owner it is not given again, what it had not (and its
 * redeliveries, its leases) it is. A group that already took some of r's
 * own messages here (pushed while the partition was in transit) keeps
 * them taken: what it had not taken of them becomes its redeliveries, so
 * nothing is given twice. A redelivery at the queue's retryLimit is a
 * retry drop, as the lease it was would have been at its expiry. A group
 * past the queue's cap is left out. Not a push: the tenant's pushed count
 * stays. */
struct ephd_transfer;
void ephd_engine_accept(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r,
                        const struct ephd_transfer *t, uint64_t now_ms);
/* While on, a ring opened is born awaiting a hand-over (ephd_ring_t): this
 * broker took partitions over, and a new one may be among them. */
void ephd_engine_hold_new_rings(int on);
/* r awaits no hand-over any more: it frees what its groups are all past. */
void ephd_engine_release(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r);

/* Takes up to batch deliveries for a group (ring NULL: any partition), writing
 * each as a JSON object, comma-separated, into out, and stops taking once
 * what it wrote reaches max_bytes (one delivery is always taken; SIZE_MAX:
 * no bound). Returns the count. */
uint32_t ephd_engine_pop(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r,
                         uint32_t group, uint32_t batch, int auto_ack,
                         uint64_t now_ms, ephd_buf_t *out, size_t max_bytes);
/* Whether a pop would deliver anything now, decided before it creates what
 * it names: a new queue (q NULL) or partition (new_ring) holds nothing, and
 * a new group starts at the rings' heads, so it sees what they hold. Applies
 * ttl first, as the pop would. */
int ephd_engine_would_deliver(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r,
                              int new_ring, int new_group, uint32_t group,
                              uint64_t now_ms);
/* Whether a group could take anything now, without taking it. */
int ephd_engine_ready(ephd_queue_t *q, ephd_ring_t *r, uint32_t group);
/* Wakes group's gate as pushes to r (NULL: to each of q's rings) would:
 * for waiters a windowed pop held back and no longer holds back. */
void ephd_engine_wake_group(ephd_queue_t *q, ephd_ring_t *r, uint32_t group);
/* How many deliveries a group could take now, counting up to cap. */
uint64_t ephd_engine_available(ephd_queue_t *q, ephd_ring_t *r, uint32_t group,
                               uint64_t cap);

ephd_outcome_t ephd_engine_ack(ephd_engine_t *e, ephd_queue_t *q,
                               uint32_t group, const char *id, size_t id_len,
                               ephd_ack_status_t status, uint64_t now_ms);

uint64_t ephd_engine_reset(ephd_engine_t *e, ephd_queue_t *q);
/* The partition moved to another broker: r is emptied as a reset empties
 * it, and the ids it delivered so far answer stale from now on (the loss
 * contract: they were this copy's, and this copy is gone). The ring, its
 * name and cursors stay, empty, for the fence and a later move back.
 * Returns the messages dropped; *bytes their payload bytes. */
uint64_t ephd_engine_wipe(ephd_engine_t *e, ephd_queue_t *q, ephd_ring_t *r,
                          uint64_t *bytes);
/* Answers the queue's parked pops, then frees it. */
void ephd_engine_delete(ephd_engine_t *e, ephd_queue_t *q);

/* --- what callers read ---------------------------------------------------
 * The commands, the status reads, metrics and main see the engine through
 * these, never through its structs' fields. */

uint32_t ephd_engine_epoch(const ephd_engine_t *e);
/* Implicit queues collected, ever (main's measure of activity). */
uint64_t ephd_engine_collected(const ephd_engine_t *e);
/* The footprint of everything (cellBytes). */
uint64_t ephd_engine_cell_bytes(const ephd_engine_t *e);

/* The whole broker's counts, summed over tenants: nothing per queue. */
typedef struct {
  uint64_t pushed, delivered, acked;
  uint64_t dropped_bounds, dropped_ttl, dropped_retry;
  uint64_t parked, queues, tenants, cell_bytes;
} ephd_engine_totals_t;
void ephd_engine_totals(const ephd_engine_t *e, ephd_engine_totals_t *out);

/* Every tenant in turn (*pos starts at 0; NULL when done). */
ephd_tenant_t *ephd_engine_next_tenant(const ephd_engine_t *e, size_t *pos);
const char *ephd_tenant_name(const ephd_tenant_t *t, size_t *len);
void ephd_tenant_stats_of(const ephd_tenant_t *t, ephd_tenant_stats_t *out);
/* Pops of t parked now. */
static inline uint64_t ephd_tenant_parked(const ephd_tenant_t *t) {
  return t->parked;
}
ephd_queue_t *ephd_tenant_queue(const ephd_tenant_t *t, const char *name,
                                size_t len);
/* Each of t's queues in turn (*pos starts at 0; NULL when done). */
ephd_queue_t *ephd_tenant_next_queue(const ephd_tenant_t *t, size_t *pos);

static inline const char *ephd_queue_name(const ephd_queue_t *q, size_t *len) {
  *len = q->name_len;
  return q->name;
}
/* Messages in memory, as last counted (ttl drops wait for the queue's
 * next touch or sweep). */
static inline uint64_t ephd_queue_depth(const ephd_queue_t *q) {
  return q->depth;
}
/* The options in force. */
static inline const ephd_options_t *ephd_queue_options(const ephd_queue_t *q) {
  return &q->opts;
}
/* Where the pops of a group park. A group is never moved, so neither is
 * its gate. */
static inline ephd_gate_t *ephd_queue_gate(ephd_queue_t *q, uint32_t group) {
  return &q->groups[group]->gate;
}

/* What a status read shows of a queue. */
typedef struct {
  int declared;
  uint64_t depth, bytes; /* messages and their payload bytes */
  uint32_t partitions;
  uint32_t groups; /* queue mode's cursor among them, as Queen counts */
  uint64_t dropped_bounds, dropped_ttl, dropped_retry;
  uint64_t parked; /* pops parked on its groups' gates (queue mode's too) */
} ephd_queue_info_t;
void ephd_queue_info(const ephd_queue_t *q, ephd_queue_info_t *out);

/* The groups a depth read may ask for besides a group's index: none named
 * (each partition's worst backlog), or a group not seen yet (it would start
 * at the heads, so everything held is its backlog). */
#define EPHD_DEPTH_WORST UINT32_MAX
#define EPHD_DEPTH_NEW (UINT32_MAX - 1)

/* A partition as a group sees it: its backlog, Queen's pending (from the
 * cursor to the tail, plus redeliveries: leased messages are not pending),
 * and its payload bytes. For EPHD_DEPTH_WORST the backlog is the worst
 * named group's, else queue mode's, else every message held. */
typedef struct {
  const char *name;
  size_t name_len;
  uint64_t pending, bytes;
} ephd_partition_info_t;
/* Each partition of q in turn (*pos starts at 0); 0 when done. */
int ephd_queue_next_partition(const ephd_queue_t *q, uint32_t *pos,
                              uint32_t group, ephd_partition_info_t *out);

/* A group over every partition: its backlog and skipped messages. Queue
 * mode's shared cursor is one, by its name EPHD_QUEUE_MODE. */
typedef struct {
  const char *name;
  size_t name_len;
  uint64_t pending, skipped;
} ephd_group_info_t;
/* Each group of q in turn (*pos starts at 0); 0 when done. */
int ephd_queue_next_group(const ephd_queue_t *q, uint32_t *pos,
                          ephd_group_info_t *out);

#endif
