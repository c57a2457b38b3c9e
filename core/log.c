#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "buf.h"
#include "ffi.h"

/* The timestamp down to the second is formatted once a second: with the
 * request log on (QUEEN_EPHEMERAL_LOG_REQUESTS) a line is written per
 * request, and snprintf was most of a line's cost. Per thread, as any
 * thread may log. */
static void stamp(ephd_buf_t *b, const char *level, const char *event) {
  static _Thread_local int64_t last_sec = -1;
  static _Thread_local char seconds[48];
  uv_timeval64_t tv;
  uv_gettimeofday(&tv);
  if (tv.tv_sec != last_sec) {
    time_t secs = (time_t)tv.tv_sec;
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(seconds, sizeof(seconds), "ts=%04d-%02d-%02dT%02d:%02d:%02d.",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec);
    last_sec = tv.tv_sec;
  }
  int ms = (int)(tv.tv_usec / 1000);
  char frac[5] = {(char)('0' + ms / 100), (char)('0' + ms / 10 % 10),
                  (char)('0' + ms % 10), 'Z', 0};
  ephd_buf_appends(b, seconds);
  ephd_buf_appends(b, frac);
  ephd_buf_appends(b, " level=");
  ephd_buf_appends(b, level);
  ephd_buf_appends(b, " event=");
  ephd_buf_appends(b, event);
}

/* Bare when it can be, quoted (with \" \\ \n) when it has a space, an
 * '=', a quote, a control character, or nothing at all. */
static void value(ephd_buf_t *b, const char *v) {
  int bare = *v != 0;
  for (const char *p = v; *p && bare; p++)
    if (*p <= ' ' || *p == '=' || *p == '"' || *p == '\\') bare = 0;
  if (bare) {
    ephd_buf_appends(b, v);
    return;
  }
  ephd_buf_append(b, "\"", 1);
  for (const char *p = v; *p; p++) {
    if (*p == '"' || *p == '\\') {
      ephd_buf_append(b, "\\", 1);
      ephd_buf_append(b, p, 1);
    } else if (*p == '\n') {
      ephd_buf_appends(b, "\\n");
    } else if ((unsigned char)*p < ' ') {
      ephd_buf_append(b, " ", 1);
    } else {
      ephd_buf_append(b, p, 1);
    }
  }
  ephd_buf_append(b, "\"", 1);
}

static void emit(ephd_buf_t *b) {
  ephd_buf_append(b, "\n", 1);
  fwrite(b->base, 1, b->len, stderr);
  ephd_buf_free(b);
}

static int debug_on;

void ephd_log_debug(int on) { debug_on = on; }

static int muted(const char *level) {
  return !debug_on && strcmp(level, "debug") == 0;
}

void ephd_log(const char *level, const char *event, ...) {
  if (muted(level)) return;
  ephd_buf_t b;
  ephd_buf_init(&b);
  stamp(&b, level, event);
  va_list ap;
  va_start(ap, event);
  const char *k;
  while ((k = va_arg(ap, const char *))) {
    const char *v = va_arg(ap, const char *);
    ephd_buf_append(&b, " ", 1);
    ephd_buf_appends(&b, k);
    ephd_buf_append(&b, "=", 1);
    value(&b, v ? v : "");
  }
  va_end(ap);
  emit(&b);
}

void ephd_ffi_log_fields(const char *level, const char *event,
                         const char *fields) {
  if (muted(level)) return;
  ephd_buf_t b;
  ephd_buf_init(&b);
  stamp(&b, level, event);
  if (fields && *fields) {
    ephd_buf_append(&b, " ", 1);
    ephd_buf_appends(&b, fields);
  }
  emit(&b);
}
