#include "metrics.h"

#include <stdio.h>
#include <string.h>

#include "errors.h"
#include "ffi.h"
#include "forward.h"
#include "handover.h"
#include "http.h"

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

void ephd_metrics_init(const ephd_engine_t *e) { engine = e; }

void ephd_ffi_metrics_route(int idx, const char *name) {
  if (idx <= 0 || idx >= EPHD_METRICS_ROUTES) return;
  snprintf(route_names[idx], sizeof(route_names[idx]), "%s", name);
}

void ephd_metrics_observe(int route, int status, uint64_t ns) {
  if (route < 0 || route >= EPHD_METRICS_ROUTES) route = 0;
  requests[route][ephd_status_index(status)]++;
  double secs = (double)ns / 1e9;
  size_t b = 0;
  while (b < NBUCKET && secs > BUCKETS[b]) b++;
  buckets[route][b]++;
  seconds_sum[route] += secs;
}

static void family(ephd_buf_t *o, const char *name, const char *type,
                   const char *help) {
  ephd_buf_appends(o, "# HELP ");
  ephd_buf_appends(o, name);
  ephd_buf_append(o, " ", 1);
  ephd_buf_appends(o, help);
  ephd_buf_appends(o, "\n# TYPE ");
  ephd_buf_appends(o, name);
  ephd_buf_append(o, " ", 1);
  ephd_buf_appends(o, type);
  ephd_buf_append(o, "\n", 1);
}

static void sample(ephd_buf_t *o, const char *name, const char *labels,
                   uint64_t v) {
  ephd_buf_appends(o, name);
  ephd_buf_appends(o, labels);
  ephd_buf_append(o, " ", 1);
  ephd_buf_append_u64(o, v);
  ephd_buf_append(o, "\n", 1);
}

static void write_engine(ephd_buf_t *o, size_t connections) {
  /* Summed over tenants, not queues: a scrape costs nothing per queue. */
  ephd_engine_totals_t t;
  ephd_engine_totals(engine, &t);
  const char *m = "queen_ephemeral_messages_total";
  family(o, m, "counter",
         "Messages by verb: pushed item by item, popped as deliveries, "
         "acked as settled leases.");
  sample(o, m, "{verb=\"pushed\"}", t.pushed);
  sample(o, m, "{verb=\"popped\"}", t.delivered);
  sample(o, m, "{verb=\"acked\"}", t.acked);
  const char *d = "queen_ephemeral_dropped_total";
  family(o, d, "counter", "Messages dropped, by cause.");
  sample(o, d, "{cause=\"bounds\"}", t.dropped_bounds);
  sample(o, d, "{cause=\"ttl\"}", t.dropped_ttl);
  sample(o, d, "{cause=\"retry\"}", t.dropped_retry);
  family(o, "queen_ephemeral_bytes", "gauge",
         "The whole broker's footprint (cellBytes): payloads, per-message "
         "overhead, names and structures.");
  sample(o, "queen_ephemeral_bytes", "", t.cell_bytes);
  family(o, "queen_ephemeral_tenants", "gauge",
         "Tenant records in memory (forgotten after the idle time without "
         "a queue).");
  sample(o, "queen_ephemeral_tenants", "", t.tenants);
  family(o, "queen_ephemeral_queues", "gauge", "Queues in memory.");
  sample(o, "queen_ephemeral_queues", "", t.queues);
  family(o, "queen_ephemeral_parked_polls", "gauge",
         "Pops parked on a gate, waiting for a message.");
  sample(o, "queen_ephemeral_parked_polls", "", t.parked);
  family(o, "queen_ephemeral_connections", "gauge", "Open connections.");
  sample(o, "queen_ephemeral_connections", "", connections);
}

static void write_http(ephd_buf_t *o) {
  const char *r = "queen_ephemeral_http_requests_total";
  family(o, r, "counter", "HTTP requests answered, by route and status.");
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
      sample(o, r, labels, requests[i][s]);
    }
  }
  const char *h = "queen_ephemeral_request_duration_seconds";
  family(o, h, "histogram",
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
      sample(o, name, labels, cum);
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
    sample(o, name, labels, cum);
  }
}

void ephd_ffi_metrics(const ephd_request_t *req, const char *extra,
                      size_t len) {
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_t *o = ephd_http_begin_as(c, 200, NULL, "text/plain; version=0.0.4");
  write_engine(o, ephd_http_connections());
  write_http(o);
  ephd_forward_metrics(o);
  ephd_handover_metrics(o);
  ephd_buf_append(o, extra, len);
  ephd_http_end(c);
}
