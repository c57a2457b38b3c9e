/* Ownership moves: see handover.h. */
#include "handover.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static ephd_engine_t *engine;
static int enabled;

/* Messages dropped because their partition moved away, ever. */
static uint64_t wiped_messages;

void ephd_handover_init(ephd_engine_t *e, int on) {
  engine = e;
  enabled = on;
}

/* The partitions to move, found by one walk and acted on after it (the
 * walk must not change the engine): each entry is the three names, each
 * length-prefixed, in one buffer. */
typedef struct {
  const ephd_view_t *view;
  ephd_buf_t moving;
  uint32_t count;
} walk_t;

static void append_name(ephd_buf_t *b, const char *s, size_t len) {
  ephd_buf_append(b, (const char *)&len, sizeof(len));
  ephd_buf_append(b, s, len);
}

static const char *take_name(const char **p, size_t *len) {
  memcpy(len, *p, sizeof(*len));
  const char *s = *p + sizeof(*len);
  *p = s + *len;
  return s;
}

static void find_moving(void *arg, const char *tenant, size_t tenant_len,
                        const char *queue, size_t queue_len,
                        const char *partition, size_t partition_len) {
  walk_t *w = arg;
  const ephd_member_t *owner = ephd_placement_owner(
      w->view, tenant, tenant_len, queue, queue_len, partition, partition_len);
  if (owner == &w->view->members[w->view->self]) return;
  append_name(&w->moving, tenant, tenant_len);
  append_name(&w->moving, queue, queue_len);
  append_name(&w->moving, partition, partition_len);
  w->count++;
}

void ephd_handover_view_changed(const ephd_view_t *view) {
  /* Removing members never moves a survivor's partitions away from it:
   * only a view with members this one did not have can. Every partition
   * held is walked all the same, so a copy left over from an earlier
   * disagreement of views goes too. */
  if (!enabled || view->count < 2) return;
  walk_t w = {.view = view};
  ephd_buf_init(&w.moving);
  ephd_engine_each_partition(engine, find_moving, &w);
  uint64_t messages = 0, bytes = 0, partitions = 0;
  const char *p = w.moving.base;
  for (uint32_t i = 0; i < w.count; i++) {
    size_t tl, ql, pl;
    const char *t = take_name(&p, &tl);
    const char *q = take_name(&p, &ql);
    const char *part = take_name(&p, &pl);
    ephd_queue_t *queue = ephd_engine_queue(engine, t, tl, q, ql);
    ephd_ring_t *r = queue ? ephd_queue_ring(queue, part, pl) : NULL;
    if (r == NULL) continue;
    uint64_t b, m = ephd_engine_wipe(engine, queue, r, &b);
    if (m == 0) continue;
    messages += m;
    bytes += b;
    partitions++;
  }
  ephd_buf_free(&w.moving);
  if (partitions == 0) return;
  wiped_messages += messages;
  char np[24], nm[24], nb[24];
  snprintf(np, sizeof(np), "%" PRIu64, partitions);
  snprintf(nm, sizeof(nm), "%" PRIu64, messages);
  snprintf(nb, sizeof(nb), "%" PRIu64, bytes);
  ephd_log("warn", "partitions_wiped", "reason", "unplanned", "partitions", np,
           "messages", nm, "bytes", nb, "msg",
           "their new owner starts them empty (the loss contract)", NULL);
}

void ephd_handover_metrics(ephd_buf_t *o) {
  ephd_buf_appends(o,
                   "# HELP queen_ephemeral_wipes_total Messages dropped "
                   "because their partition moved to another broker "
                   "without being handed over.\n"
                   "# TYPE queen_ephemeral_wipes_total counter\n"
                   "queen_ephemeral_wipes_total{reason=\"unplanned\"} ");
  ephd_buf_append_u64(o, wiped_messages);
  ephd_buf_append(o, "\n", 1);
}
