/* The counters behind GET /metrics that only C sees (requests by route and
 * status, latency by route, the engine's totals), and the Prometheus text
 * they are written as. Counting is a few array increments per answer;
 * writing costs nothing proportional to the number of queues. */
#ifndef EPHD_METRICS_H
#define EPHD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "engine.h"
#include "ffi.h"

/* Route 0 is "none": what the HTTP layer answers itself. */
#define EPHD_METRICS_ROUTES (EPHD_ROUTES_MAX + 1)

/* queue_depths: how many of the deepest queues /metrics lists one by one
 * (QUEEN_EPHEMERAL_METRICS_QUEUES; 0: none, nothing walks queues). */
void ephd_metrics_init(const ephd_engine_t *engine, uint32_t queue_depths);
/* One answer: its route (0: none, the HTTP layer's own), status, error
 * code (EPHD_CODE_COUNT: none), and the nanoseconds from the request's last
 * byte to its answer. */
void ephd_metrics_observe(int route, int status, int code, uint64_t ns);

#endif
