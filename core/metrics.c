#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "fanout.h"
#include "ffi.h"
#include "handover.h"
#include "http.h"
#include "members.h"
#include "prom.h"
#include "relay_edge.h"

static const ephd_engine_t *engine;

/* Requests are counted by each status of lua/ephd/codes.lua, and "other". */
#define NSTATUS EPHD_STATUS_COUNT
/* Seconds; a parked pop's latency includes its wait. */
static const double BUCKETS[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                 0.005,  0.01,    0.05,   0.1,   0.5,
                                 1,      5,       30,     300};
#define NBUCKET (sizeof(BUCKETS) / sizeof(BUCKETS[0]))

static char route_names[EPHD_METRICS_ROUTES][32] = {"none"};
static uint64_t requests[EPHD_METRICS_ROUTES][NSTATUS + 1]; /* + other */
static uint64_t buckets[EPHD_METRICS_ROUTES][NBUCKET + 1];  /* + +Inf */
static double seconds_sum[EPHD_METRICS_ROUTES];
/* Error answers by code, and at EPHD_CODE_COUNT the rest, uncounted: so
 * counting is one increment, never a branch. */
static uint64_t refusals[EPHD_CODE_COUNT + 1];

static uint32_t queue_depths;

void ephd_metrics_init(const ephd_engine_t *e, uint32_t depths) {
  engine = e;
  queue_depths = depths;
}

void ephd_ffi_metrics_route(int idx, const char *name) {
  if (idx <= 0 || idx >= EPHD_METRICS_ROUTES) return;
  snprintf(route_names[idx], sizeof(route_names[idx]), "%s", name);
}

void ephd_metrics_observe(int route, int status, int code, uint64_t ns) {
  if (route < 0 || route >= EPHD_METRICS_ROUTES) route = 0;
  requests[route][ephd_status_index(status)]++;
  refusals[code]++; /* EPHD_CODE_COUNT, every answer that is no error */
  double secs = (double)ns / 1e9;
  size_t b = 0;
  while (b < NBUCKET && secs > BUCKETS[b]) b++;
  buckets[route][b]++;
  seconds_sum[route] += secs;
}

static void write_engine(ephd_buf_t *o, size_t connections) {
  /* Summed over tenants, not queues: a scrape costs nothing per queue. */
  ephd_engine_totals_t t;
  ephd_engine_totals(engine, &t);
  const char *m = "queen_ephemeral_messages_total";
  ephd_prom_family(
      o, m, "counter",
      "Messages by verb: pushed item by item, popped as deliveries, "
      "acked as settled leases.");
  ephd_prom_sample(o, m, "{verb=\"pushed\"}", t.pushed);
  ephd_prom_sample(o, m, "{verb=\"popped\"}", t.delivered);
  ephd_prom_sample(o, m, "{verb=\"acked\"}", t.acked);
  const char *d = "queen_ephemeral_dropped_total";
  ephd_prom_family(o, d, "counter", "Messages dropped, by cause.");
  ephd_prom_sample(o, d, "{cause=\"bounds\"}", t.dropped_bounds);
  ephd_prom_sample(o, d, "{cause=\"ttl\"}", t.dropped_ttl);
  ephd_prom_sample(o, d, "{cause=\"retry\"}", t.dropped_retry);
  ephd_prom_family(
      o, "queen_ephemeral_bytes", "gauge",
      "The whole broker's footprint (cellBytes): payloads, per-message "
      "overhead, names and structures.");
  ephd_prom_sample(o, "queen_ephemeral_bytes", "", t.cell_bytes);
  ephd_prom_family(
      o, "queen_ephemeral_tenants", "gauge",
      "Tenant records in memory (forgotten after the idle time without "
      "a queue).");
  ephd_prom_sample(o, "queen_ephemeral_tenants", "", t.tenants);
  ephd_prom_family(o, "queen_ephemeral_queues", "gauge", "Queues in memory.");
  ephd_prom_sample(o, "queen_ephemeral_queues", "", t.queues);
  ephd_prom_family(o, "queen_ephemeral_parked_polls", "gauge",
                   "Pops parked on a gate, waiting for a message.");
  ephd_prom_sample(o, "queen_ephemeral_parked_polls", "", t.parked);
  ephd_prom_family(o, "queen_ephemeral_connections", "gauge",
                   "Open connections.");
  ephd_prom_sample(o, "queen_ephemeral_connections", "", connections);
  ephd_prom_family(
      o, "queen_ephemeral_members_live", "gauge",
      "Live members of the cell in this broker's view, itself included "
      "(1: a cell of one).");
  ephd_prom_sample(o, "queen_ephemeral_members_live", "",
                   ephd_members_view()->count);
}

static void write_http(ephd_buf_t *o) {
  ephd_prom_family(
      o, "queen_ephemeral_client_bytes", "gauge",
      "What every connection's buffers hold (QUEEN_EPHEMERAL_MAX_CLIENT_"
      "BYTES bounds it).");
  ephd_prom_sample(o, "queen_ephemeral_client_bytes", "",
                   ephd_http_client_bytes());
  ephd_prom_family(
      o, "queen_ephemeral_clients_evicted_total", "counter",
      "Connections closed for holding the most buffers while all of them "
      "held more than QUEEN_EPHEMERAL_MAX_CLIENT_BYTES.");
  ephd_prom_sample(o, "queen_ephemeral_clients_evicted_total", "",
                   ephd_http_evicted());
  const char *r = "queen_ephemeral_http_requests_total";
  ephd_prom_family(o, r, "counter",
                   "HTTP requests answered, by route and status.");
  char labels[128];
  for (int i = 0; i < EPHD_METRICS_ROUTES; i++) {
    if (!route_names[i][0]) continue;
    for (size_t s = 0; s <= NSTATUS; s++) {
      if (!requests[i][s]) continue;
      if (s < NSTATUS)
        snprintf(labels, sizeof(labels), "{route=\"%.31s\",status=\"%d\"}",
                 route_names[i], ephd_status_at(s));
      else
        snprintf(labels, sizeof(labels), "{route=\"%.31s\",status=\"other\"}",
                 route_names[i]);
      ephd_prom_sample(o, r, labels, requests[i][s]);
    }
  }
  const char *h = "queen_ephemeral_request_duration_seconds";
  ephd_prom_family(
      o, h, "histogram",
      "Seconds from a request's last byte to its answer, by route.");
  char name[96];
  for (int i = 0; i < EPHD_METRICS_ROUTES; i++) {
    if (!route_names[i][0]) continue;
    uint64_t cum = 0;
    snprintf(name, sizeof(name), "%s_bucket", h);
    for (size_t b = 0; b <= NBUCKET; b++) {
      cum += buckets[i][b];
      if (b < NBUCKET)
        snprintf(labels, sizeof(labels), "{route=\"%.31s\",le=\"%g\"}",
                 route_names[i], BUCKETS[b]);
      else
        snprintf(labels, sizeof(labels), "{route=\"%.31s\",le=\"+Inf\"}",
                 route_names[i]);
      ephd_prom_sample(o, name, labels, cum);
    }
    char sum[64];
    snprintf(sum, sizeof(sum), "%.6f", seconds_sum[i]);
    ephd_buf_appends(o, h);
    snprintf(labels, sizeof(labels), "_sum{route=\"%.31s\"} ", route_names[i]);
    ephd_buf_appends(o, labels);
    ephd_buf_appends(o, sum);
    ephd_buf_append(o, "\n", 1);
    snprintf(name, sizeof(name), "%s_count", h);
    snprintf(labels, sizeof(labels), "{route=\"%.31s\"}", route_names[i]);
    ephd_prom_sample(o, name, labels, cum);
  }
}

static void write_refusals(ephd_buf_t *o) {
  const char *r = "queen_ephemeral_refusals_total";
  ephd_prom_family(
      o, r, "counter",
      "Error answers by code (lua/ephd/codes.lua), the HTTP layer's own "
      "included.");
  char labels[64];
  for (int i = 0; i < EPHD_CODE_COUNT; i++) {
    snprintf(labels, sizeof(labels), "{code=\"%s\"}",
             ephd_code_name((ephd_code_t)i));
    ephd_prom_sample(o, r, labels, refusals[i]);
  }
}

/* The deepest queues, kept in a min-heap of queue_depths by depth: one
 * pass over every queue and O(log N) per queue deeper than the shallowest
 * kept, so the series are at most queue_depths whatever the broker holds.
 * The pointers live only through the scrape, which changes nothing. */
typedef struct {
  uint64_t depth;
  const ephd_tenant_t *tenant;
  const ephd_queue_t *queue;
} deep_t;

static void sift_down(deep_t *h, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    if (l < n && h[l].depth < h[m].depth) m = l;
    if (l + 1 < n && h[l + 1].depth < h[m].depth) m = l + 1;
    if (m == i) return;
    deep_t t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

static void sift_up(deep_t *h, size_t i) {
  while (i > 0 && h[(i - 1) / 2].depth > h[i].depth) {
    deep_t t = h[i];
    h[i] = h[(i - 1) / 2];
    h[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static void write_queue_depths(ephd_buf_t *o) {
  if (queue_depths == 0) return;
  const char *d = "queen_ephemeral_queue_depth";
  ephd_prom_family(o, d, "gauge",
                   "Messages in memory of the deepest queues "
                   "(QUEEN_EPHEMERAL_METRICS_QUEUES of them).");
  deep_t *heap = malloc(queue_depths * sizeof(*heap));
  if (heap == NULL) abort();
  size_t n = 0, tpos = 0;
  const ephd_tenant_t *t;
  while ((t = ephd_engine_next_tenant(engine, &tpos))) {
    size_t qpos = 0;
    const ephd_queue_t *q;
    while ((q = ephd_tenant_next_queue(t, &qpos))) {
      deep_t e = {ephd_queue_depth(q), t, q};
      if (n < queue_depths) {
        heap[n] = e;
        sift_up(heap, n++);
      } else if (e.depth > heap[0].depth) {
        heap[0] = e;
        sift_down(heap, n, 0);
      }
    }
  }
  static const char *const keys[] = {"tenant", "queue"};
  for (size_t i = 0; i < n; i++) {
    ephd_slice_t names[2];
    names[0].ptr = ephd_tenant_name(heap[i].tenant, &names[0].len);
    names[1].ptr = ephd_queue_name(heap[i].queue, &names[1].len);
    ephd_prom_sample_of(o, d, keys, names, 2, (double)heap[i].depth);
  }
  free(heap);
}

/* The families only Lua counts, by EPHD_METRIC_*: their samples come from
 * Lua, their names, HELP texts and labels are written here alone. */
typedef struct {
  const char *name, *type, *help;
  int labels;
  const char *keys[2];
} lua_family_t;

static const lua_family_t LUA_FAMILIES[EPHD_METRIC_FAMILIES] = {
    [EPHD_METRIC_HOOK_FAILURES] =
        {
            .name = "queen_ephemeral_policy_hook_failures_total",
            .type = "counter",
            .help =
                "Policy hook calls that raised, returned garbage or overran "
                "their budget.",
            .labels = 1,
            .keys = {"hook"},
        },
    [EPHD_METRIC_POLICY_RELOADS] =
        {
            .name = "queen_ephemeral_policy_reloads_total",
            .type = "counter",
            .help = "Policy reloads, by outcome.",
            .labels = 1,
            .keys = {"outcome"},
        },
    /* Its version as the value, its name as a label: one series, which a
     * reload to another name replaces. */
    [EPHD_METRIC_POLICY_VERSION] =
        {
            .name = "queen_ephemeral_policy_version",
            .type = "gauge",
            .help = "The version of the policy in force, by name.",
            .labels = 1,
            .keys = {"name"},
        },
    [EPHD_METRIC_SHADOW_DECISIONS] =
        {
            .name = "queen_ephemeral_shadow_decisions_total",
            .type = "counter",
            .help = "Requests the shadow policy judged, by the live policy's "
                    "outcome and the shadow's (pass or a code).",
            .labels = 2,
            .keys = {"live", "shadow"},
        },
    [EPHD_METRIC_SHADOW_DISABLED] =
        {
            .name = "queen_ephemeral_shadow_disabled_total",
            .type = "counter",
            .help = "Shadow policies disabled by a hook that failed.",
        },
};

/* Every family's head, a family with no sample too, and its samples in the
 * order Lua gave them. */
static void write_lua(ephd_buf_t *o, const ephd_metric_t *samples, int n) {
  for (int f = 0; f < EPHD_METRIC_FAMILIES; f++) {
    ephd_prom_family(o, LUA_FAMILIES[f].name, LUA_FAMILIES[f].type,
                     LUA_FAMILIES[f].help);
    for (int i = 0; i < n; i++)
      if (samples[i].family == f)
        ephd_prom_sample_of(o, LUA_FAMILIES[f].name, LUA_FAMILIES[f].keys,
                            samples[i].label, LUA_FAMILIES[f].labels,
                            samples[i].value);
  }
}

void ephd_ffi_metrics(const ephd_request_t *req, const ephd_metric_t *samples,
                      int n) {
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_t *o = ephd_http_begin_as(c, 200, NULL, "text/plain; version=0.0.4");
  write_engine(o, ephd_http_connections());
  write_http(o);
  write_refusals(o);
  write_queue_depths(o);
  ephd_relay_metrics(o);
  ephd_fanout_metrics(o);
  ephd_handover_metrics(o);
  write_lua(o, samples, n);
  ephd_http_end(c);
}
