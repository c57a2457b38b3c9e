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

/* A label's value, escaped as the text format says. */
static void label_value(ephd_buf_t *o, const char *s, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '\n') {
      ephd_buf_appends(o, "\\n");
      continue;
    }
    if (s[i] == '"' || s[i] == '\\') ephd_buf_append(o, "\\", 1);
    ephd_buf_append(o, s + i, 1);
  }
}

void ephd_prom_sample_of(ephd_buf_t *o, const char *name,
                         const char *const *keys, const ephd_slice_t *values,
                         int n, double v) {
  ephd_buf_appends(o, name);
  for (int i = 0; i < n; i++) {
    ephd_buf_append(o, i ? "," : "{", 1);
    ephd_buf_appends(o, keys[i]);
    ephd_buf_append(o, "=\"", 2);
    label_value(o, values[i].ptr, values[i].len);
    ephd_buf_append(o, "\"", 1);
  }
  if (n) ephd_buf_append(o, "}", 1);
  char text[32];
  int len = snprintf(text, sizeof(text), " %.17g\n", v);
  ephd_buf_append(o, text, (size_t)len);
}
