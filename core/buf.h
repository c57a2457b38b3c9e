/* A growable byte buffer: the one place the core grows memory for bytes it
 * writes (responses, decoded names), so every growth policy lives here. */
#ifndef EPHD_BUF_H
#define EPHD_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
  char *base;
  size_t len;
  size_t cap;
} ephd_buf_t;

void ephd_buf_init(ephd_buf_t *b);
void ephd_buf_free(ephd_buf_t *b);
/* Makes room for n more bytes and returns where they go; aborts on OOM
 * because a broker that cannot grow a response buffer cannot answer. */
char *ephd_buf_reserve(ephd_buf_t *b, size_t n);
/* Inline: most appends are a few bytes into room already there (a key, a
 * head, a number), where a call would cost as much as the copy. */
static inline void ephd_buf_append(ephd_buf_t *b, const void *p, size_t n) {
  if (n == 0) return;
  char *at = b->cap - b->len >= n ? b->base + b->len : ephd_buf_reserve(b, n);
  memcpy(at, p, n);
  b->len += n;
}
/* Inline too, so a literal's length is known when compiled. */
static inline void ephd_buf_appends(ephd_buf_t *b, const char *s) {
  ephd_buf_append(b, s, strlen(s));
}
/* v in decimal at out (at most EPHD_U64_DIGITS bytes, no NUL): the count. */
enum { EPHD_U64_DIGITS = 20 };
size_t ephd_u64_format(char *out, uint64_t v);
void ephd_buf_append_u64(ephd_buf_t *b, uint64_t v);
/* Drops the first n bytes, keeping the rest at the front. */
void ephd_buf_consume(ephd_buf_t *b, size_t n);
/* Returns the allocation when it grew past keep bytes, so an idle connection
 * or a one-off huge response does not pin memory. */
void ephd_buf_shrink(ephd_buf_t *b, size_t keep);

#endif
