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

/* Counted first, then written from the last digit back, two at a time:
 * every answer's Content-Length is one, and every relayed push's frame
 * (core/scan.h) six or more. */
size_t ephd_u64_format(char *out, uint64_t v) {
  static const char pairs[] =
      "0001020304050607080910111213141516171819"
      "2021222324252627282930313233343536373839"
      "4041424344454647484950515253545556575859"
      "6061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  size_t n = 1;
  for (uint64_t t = v; t >= 10; t /= 10) n++;
  char *p = out + n;
  for (; v >= 100; v /= 100) {
    const char *two = pairs + (v % 100) * 2;
    *--p = two[1];
    *--p = two[0];
  }
  if (v >= 10) {
    *--p = pairs[v * 2 + 1];
    *--p = pairs[v * 2];
  } else {
    *--p = (char)('0' + v);
  }
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
