/* The status reads: the queue list and a queue's depth, written by C into
 * the answer (a tenant's list can be long), and a tenant's counters for
 * policy and metering. */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "commands.h"
#include "http.h"
#include "json.h"

static void write_drops(ephd_buf_t *out, const ephd_queue_info_t *info) {
  ephd_buf_appends(out, "{\"bounds\":");
  ephd_buf_append_u64(out, info->dropped_bounds);
  ephd_buf_appends(out, ",\"ttl\":");
  ephd_buf_append_u64(out, info->dropped_ttl);
  ephd_buf_appends(out, ",\"retry\":");
  ephd_buf_append_u64(out, info->dropped_retry);
  ephd_buf_append(out, "}", 1);
}

static void write_options(ephd_buf_t *out, const ephd_options_t *o) {
  ephd_buf_appends(out, "{\"maxBytes\":");
  ephd_buf_append_u64(out, o->max_bytes);
  ephd_buf_appends(out, ",\"maxLength\":");
  ephd_buf_append_u64(out, o->max_length);
  ephd_buf_appends(out, o->drop_oldest ? ",\"policy\":\"dropOldest\""
                                       : ",\"policy\":\"reject\"");
  ephd_buf_appends(out, ",\"ttlSeconds\":");
  ephd_buf_append_u64(out, o->ttl_s);
  ephd_buf_appends(out, ",\"leaseSeconds\":");
  ephd_buf_append_u64(out, o->lease_s);
  ephd_buf_appends(out, ",\"retryLimit\":");
  ephd_buf_append_u64(out, o->retry_limit);
  /* Off is {"ms":0,"count":0}, as Queen publishes it: clients read .ms. */
  ephd_buf_appends(out, ",\"windowBuffer\":{\"ms\":");
  ephd_buf_append_u64(out, o->window_ms);
  ephd_buf_appends(out, ",\"count\":");
  ephd_buf_append_u64(out, o->window_count);
  ephd_buf_appends(out, "}}");
}

static void write_name(ephd_buf_t *out, const ephd_queue_t *q) {
  size_t len;
  const char *name = ephd_queue_name(q, &len);
  ephd_json_write_string(out, name, len);
}

/* One queue's entry in its tenant's list. */
static void write_entry(ephd_buf_t *out, ephd_engine_t *e, ephd_queue_t *q,
                        uint64_t now) {
  ephd_engine_expire(e, q, now);
  ephd_queue_info_t info;
  ephd_queue_info(q, &info);
  ephd_buf_appends(out, "{\"queue\":");
  write_name(out, q);
  ephd_buf_appends(out, info.declared ? ",\"tier\":\"declared\",\"depth\":"
                                      : ",\"tier\":\"implicit\",\"depth\":");
  ephd_buf_append_u64(out, info.depth);
  ephd_buf_appends(out, ",\"bytes\":");
  ephd_buf_append_u64(out, info.bytes);
  ephd_buf_appends(out, ",\"partitions\":");
  ephd_buf_append_u64(out, info.partitions);
  ephd_buf_appends(out, ",\"groups\":");
  ephd_buf_append_u64(out, info.groups);
  ephd_buf_appends(out, ",\"parked\":");
  ephd_buf_append_u64(out, info.parked);
  ephd_buf_appends(out, ",\"drops\":");
  write_drops(out, &info);
  ephd_buf_appends(out, ",\"options\":");
  write_options(out, ephd_queue_options(q));
  ephd_buf_append(out, "}", 1);
}

static void write_list_head(ephd_buf_t *out) {
  ephd_buf_appends(out, "{\"queues\":[");
}

static void write_list_tail(ephd_buf_t *out, uint64_t count) {
  ephd_buf_appends(out, "],\"count\":");
  ephd_buf_append_u64(out, count);
  ephd_buf_appends(out, ",\"cellBytes\":");
  ephd_buf_append_u64(out, ephd_engine_cell_bytes(ephd_commands_engine));
  ephd_buf_append(out, "}", 1);
}

/* --- a long list, a slice a turn ------------------------------------------
 * A tenant may hold 100,000 queues: 27 MB of list and a few hundred
 * milliseconds to write, during which every other client waited, and the
 * whole list was held in memory until its client read it. A list of more
 * than LIST_SLICE queues is held (http.h) and streamed, LIST_SLICE
 * queues a turn, each turn given once the client has taken the last.
 * Between two slices the tenant's queues may be created, deleted and
 * rehashed, so the list copies their names first and looks each one up
 * again when its slice comes: a queue deleted meanwhile is left out, one
 * created meanwhile is not in this list. The copy (a few MB at most) is
 * counted as its connection's bytes, under QUEEN_EPHEMERAL_MAX_CLIENT_BYTES
 * (ephd_deferred_account): a fixed number of lists holding copies at once,
 * the others waiting, let that many clients that never read hold every
 * other long list until their idle timeout. */
enum { LIST_SLICE = 1000 };

typedef struct {
  ephd_deferred_t *held;
  int streaming;    /* its head is sent */
  ephd_buf_t names; /* each: its length (size_t), its bytes */
  size_t at;        /* the next name to write, in names */
  ephd_buf_t slice; /* the chunk being made */
  uint64_t count;
  size_t tenant_len;
  char tenant[];
} listing_t;

static void list_free(listing_t *l) {
  ephd_buf_free(&l->names);
  ephd_buf_free(&l->slice);
  free(l);
}

static void copy_names(listing_t *l, ephd_tenant_t *t) {
  size_t pos = 0;
  ephd_queue_t *q;
  while ((q = ephd_tenant_next_queue(t, &pos))) {
    size_t len;
    const char *name = ephd_queue_name(q, &len);
    ephd_buf_append(&l->names, (const char *)&len, sizeof(len));
    ephd_buf_append(&l->names, name, len);
  }
}

/* The next LIST_SLICE names that still name a queue, as entries. */
static void write_slice(listing_t *l, ephd_tenant_t *t) {
  ephd_engine_t *e = ephd_commands_engine;
  uint64_t now = ephd_ffi_now_ms();
  for (int i = 0; i < LIST_SLICE && l->at < l->names.len; i++) {
    size_t len;
    memcpy(&len, l->names.base + l->at, sizeof(len));
    const char *name = l->names.base + l->at + sizeof(len);
    l->at += sizeof(len) + len;
    ephd_queue_t *q = ephd_tenant_queue(t, name, len);
    if (q == NULL) continue; /* deleted since the copy */
    if (l->count++) ephd_buf_append(&l->slice, ",", 1);
    write_entry(&l->slice, e, q, now);
  }
}

static void on_list_turn(void *data) {
  listing_t *l = data;
  ephd_tenant_t *t =
      ephd_engine_tenant(ephd_commands_engine, l->tenant, l->tenant_len);
  l->slice.len = 0;
  if (!l->streaming) {
    if (t) copy_names(l, t);
    ephd_deferred_stream(l->held, 200);
    l->streaming = 1;
    write_list_head(&l->slice);
  } else if (t) {
    write_slice(l, t);
  }
  /* A tenant forgotten meanwhile had no queue left. */
  int done = t == NULL || l->at >= l->names.len;
  if (done) write_list_tail(&l->slice, l->count);
  ephd_deferred_account(l->held, l->names.cap + l->slice.cap);
  ephd_deferred_chunk(l->held, l->slice.base, l->slice.len);
  if (!done) {
    ephd_deferred_turn(l->held);
    return;
  }
  ephd_deferred_stream_end(l->held);
  list_free(l);
}

static void on_lister_left(void *data) { list_free(data); }

static const ephd_deferred_ops_t LISTING = {
    .cancel = on_lister_left,
    .turn = on_list_turn,
};

void ephd_ffi_queues(const ephd_request_t *req, const char *tenant,
                     size_t tenant_len) {
  ephd_engine_t *e = ephd_commands_engine;
  ephd_tenant_t *t = ephd_engine_tenant(e, tenant, tenant_len);
  ephd_tenant_stats_t stats = {0};
  if (t) ephd_tenant_stats_of(t, &stats);
  if (stats.queues > LIST_SLICE) {
    listing_t *l = calloc(1, sizeof(*l) + tenant_len);
    if (l) {
      memcpy(l->tenant, tenant, tenant_len);
      l->tenant_len = tenant_len;
      l->held = ephd_http_defer(req, &LISTING, l);
      ephd_deferred_turn(l->held);
      return;
    }
  }
  /* A short list (nearly all of them) is answered at once. */
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  write_list_head(out);
  uint64_t count = 0;
  if (t) {
    size_t pos = 0;
    ephd_queue_t *q;
    uint64_t now = ephd_ffi_now_ms();
    while ((q = ephd_tenant_next_queue(t, &pos))) {
      if (count++) ephd_buf_append(out, ",", 1);
      write_entry(out, e, q, now);
    }
  }
  write_list_tail(out, count);
  ephd_http_end(c);
}

static int by_group_name(const void *a, const void *b) {
  const ephd_group_info_t *x = a, *y = b;
  size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
  int c = memcmp(x->name, y->name, n);
  if (c) return c;
  return (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

int ephd_ffi_depth(const ephd_request_t *req, const char *tenant,
                   size_t tenant_len, const char *queue, size_t queue_len,
                   const char *group, size_t group_len) {
  ephd_engine_t *e = ephd_commands_engine;
  ephd_queue_t *q = ephd_engine_queue(e, tenant, tenant_len, queue, queue_len);
  if (q == NULL) return EPHD_E_NOT_FOUND;
  ephd_engine_expire(e, q, ephd_ffi_now_ms());
  uint32_t g = EPHD_DEPTH_WORST;
  if (group && !ephd_queue_group_find(q, group, group_len, &g))
    g = EPHD_DEPTH_NEW;
  ephd_queue_info_t info;
  ephd_queue_info(q, &info);
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"queue\":");
  write_name(out, q);
  ephd_buf_appends(out, ",\"group\":");
  if (group)
    ephd_json_write_string(out, group, group_len);
  else
    ephd_buf_appends(out, "null");
  ephd_buf_appends(out, info.declared ? ",\"tier\":\"declared\",\"pending\":"
                                      : ",\"tier\":\"implicit\",\"pending\":");
  /* Queen's pending: a group's backlog (leased messages are not in it), or
   * with no group named each partition's worst (engine.h). */
  uint64_t pending = 0, parts_pending = 0;
  ephd_partition_info_t part;
  uint32_t pos = 0;
  while (ephd_queue_next_partition(q, &pos, g, &part)) {
    pending += part.pending;
    if (part.pending) parts_pending++;
  }
  ephd_buf_append_u64(out, pending);
  ephd_buf_appends(out, ",\"partitionsPending\":");
  ephd_buf_append_u64(out, parts_pending);
  ephd_buf_appends(out, ",\"bytes\":");
  ephd_buf_append_u64(out, info.bytes);
  ephd_buf_appends(out, ",\"partitions\":[");
  pos = 0;
  while (ephd_queue_next_partition(q, &pos, g, &part)) {
    if (pos > 1) ephd_buf_append(out, ",", 1);
    ephd_buf_appends(out, "{\"partition\":");
    ephd_json_write_string(out, part.name, part.name_len);
    ephd_buf_appends(out, ",\"pending\":");
    ephd_buf_append_u64(out, part.pending);
    ephd_buf_appends(out, ",\"bytes\":");
    ephd_buf_append_u64(out, part.bytes);
    ephd_buf_append(out, "}", 1);
  }
  ephd_buf_appends(out, "],\"groups\":[");
  /* Sorted by name, as Queen lists them: at most QUEEN_EPHEMERAL_MAX_GROUPS
   * and queue mode, on a status read. */
  ephd_group_info_t *groups =
      calloc(info.groups ? info.groups : 1, sizeof(*groups));
  if (groups == NULL) abort();
  uint32_t n = 0;
  pos = 0;
  while (ephd_queue_next_group(q, &pos, &groups[n])) n++;
  qsort(groups, n, sizeof(*groups), by_group_name);
  for (uint32_t i = 0; i < n; i++) {
    if (i) ephd_buf_append(out, ",", 1);
    ephd_buf_appends(out, "{\"group\":");
    ephd_json_write_string(out, groups[i].name, groups[i].name_len);
    ephd_buf_appends(out, ",\"pending\":");
    ephd_buf_append_u64(out, groups[i].pending);
    ephd_buf_appends(out, ",\"skipped\":");
    ephd_buf_append_u64(out, groups[i].skipped);
    ephd_buf_append(out, "}", 1);
  }
  free(groups);
  ephd_buf_appends(out, "]}");
  ephd_http_end(c);
  return EPHD_OK;
}

int ephd_ffi_tenant_stats(const char *tenant, size_t tenant_len,
                          ephd_tenant_stats_t *out) {
  memset(out, 0, sizeof(*out));
  ephd_tenant_t *t =
      ephd_engine_tenant(ephd_commands_engine, tenant, tenant_len);
  if (t == NULL) return EPHD_E_NOT_FOUND;
  ephd_tenant_stats_of(t, out);
  return EPHD_OK;
}

int ephd_ffi_tenant_next(size_t *pos, ephd_slice_t *tenant,
                         ephd_tenant_stats_t *out) {
  ephd_tenant_t *t = ephd_engine_next_tenant(ephd_commands_engine, pos);
  if (t == NULL) return EPHD_E_NOT_FOUND;
  tenant->ptr = ephd_tenant_name(t, &tenant->len);
  ephd_tenant_stats_of(t, out);
  return EPHD_OK;
}
