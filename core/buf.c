#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ephd_buf_init(ephd_buf_t *b) {
  b->base = NULL;
  b->len = 0;
  b->cap = 0;
}

void ephd_buf_free(ephd_buf_t *b) {
  free(b->base);
  ephd_buf_init(b);
}

char *ephd_buf_reserve(ephd_buf_t *b, size_t n) {
  if (b->cap - b->len < n) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) cap *= 2;
    char *p = realloc(b->base, cap);
    if (p == NULL) {
      fprintf(stderr, "ephd: out of memory growing a buffer to %zu\n", cap);
      abort();
    }
    b->base = p;
    b->cap = cap;
  }
  return b->base + b->len;
}

size_t ephd_u64_format(char *out, uint64_t v) {
  char tmp[20];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  return n;
}

void ephd_buf_append_u64(ephd_buf_t *b, uint64_t v) {
  b->len += ephd_u64_format(ephd_buf_reserve(b, EPHD_U64_DIGITS), v);
}

void ephd_buf_consume(ephd_buf_t *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
    return;
  }
  memmove(b->base, b->base + n, b->len - n);
  b->len -= n;
}

void ephd_buf_shrink(ephd_buf_t *b, size_t keep) {
  if (b->len == 0 && b->cap > keep) ephd_buf_free(b);
}
