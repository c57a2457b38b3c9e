#include "prom.h"

#include <stdio.h>

void ephd_prom_family(ephd_buf_t *o, const char *name, const char *type,
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

void ephd_prom_sample(ephd_buf_t *o, const char *name, const char *labels,
                      uint64_t v) {
  ephd_buf_appends(o, name);
  ephd_buf_appends(o, labels);
  ephd_buf_append(o, " ", 1);
  ephd_buf_append_u64(o, v);
  ephd_buf_append(o, "\n", 1);
}

void ephd_prom_grid(ephd_buf_t *o, const char *name, const char *label_a,
                    const char *const *a, int na, const char *label_b,
                    const char *const *b, int nb, const uint64_t *values) {
  char labels[160];
  for (int i = 0; i < na; i++)
    for (int j = 0; j < nb; j++) {
      snprintf(labels, sizeof(labels), "{%s=\"%s\",%s=\"%s\"}", label_a, a[i],
               label_b, b[j]);
      ephd_prom_sample(o, name, labels, values[i * nb + j]);
    }
}
