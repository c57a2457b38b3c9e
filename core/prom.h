/* Prometheus's text format, for every module that reports its own
 * counters in GET /metrics (metrics.c writes the page and calls them): one
 * writer, so a family's HELP and TYPE and a sample's line are spelled once. */
#ifndef EPHD_PROM_H
#define EPHD_PROM_H

#include <stdint.h>

#include "buf.h"
#include "ffi.h"

/* The # HELP and # TYPE lines of a family. */
void ephd_prom_family(ephd_buf_t *o, const char *name, const char *type,
                      const char *help);
/* One sample: name, its labels ("" or "{k=\"v\"}") and value. */
void ephd_prom_sample(ephd_buf_t *o, const char *name, const char *labels,
                      uint64_t v);
/* One sample whose label values are data: keys[i]="values[i]" for i < n
 * (no braces when n is 0), each value escaped as the format says ('\\',
 * '"', a newline), and a value that is a whole number up to 2^53 written
 * as one (%.17g). */
void ephd_prom_sample_of(ephd_buf_t *o, const char *name,
                         const char *const *keys, const ephd_slice_t *values,
                         int n, double v);
/* A counter of two labels from its table of values, row by row: a's
 * names down, b's across (values[i * nb + j] for a[i] and b[j]). */
void ephd_prom_grid(ephd_buf_t *o, const char *name, const char *label_a,
                    const char *const *a, int na, const char *label_b,
                    const char *const *b, int nb, const uint64_t *values);

#endif
