/* The route matcher (core/routes.c): a table of rows and a request, both
 * from the input, checked against a reference written the plain way. The
 * input is lines: "METHOD PATH [head]" rows, an empty line, then the
 * request's method and path on one line (its path may hold anything but a
 * newline). Without an empty line the rows are the broker's own shapes.
 * Properties: a table the matcher takes answers every request as the
 * reference does (exact paths before parameterised ones, in the table's
 * order), the parameter is the part of the path between the prefix and the
 * suffix, and a table it refuses leaves the one in force. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffi.h"

#define MAX_ROWS 32

typedef struct {
  char method[64];
  char path[256];
  int head;
} row_t;

static const row_t broker[] = {
    {"POST", "/api/v1/ephemeral/push", 0},
    {"GET", "/api/v1/ephemeral/pop", 0},
    {"DELETE", "/api/v1/ephemeral/queue/:queue", 0},
    {"GET", "/api/v1/ephemeral/queues", 1},
    {"GET", "/api/v1/ephemeral/queues/:queue/depth", 1},
    {"GET", "/api/v1/system/ephemeral", 1},
    {"POST", "/api/v1/system/ephemeral", 0},
    {"GET", "/health", 1},
};

/* Whether path matches pattern, the reference way: split the pattern at
 * ":" into prefix and "/suffix", and compare both ends. */
static int matches(const char *pattern, const char *path, size_t len,
                   size_t *param_at, size_t *param_len) {
  const char *colon = strchr(pattern, ':');
  if (colon == NULL)
    return strlen(pattern) == len && !memcmp(pattern, path, len);
  size_t pre = (size_t)(colon - pattern);
  const char *rest = strchr(colon, '/');
  size_t suf = rest ? strlen(rest) : 0;
  if (len < pre + suf || memcmp(path, pattern, pre) != 0 ||
      (suf && memcmp(path + len - suf, rest, suf) != 0))
    return 0;
  *param_at = pre;
  *param_len = len - pre - suf;
  return 1;
}

/* The reference: the first exact row whose path matches, else the first
 * parameterised one; then the row of that path with the method. */
static int reference(const row_t *rows, int n, const char *method,
                     const char *path, size_t len, int *route) {
  size_t at, plen;
  int found = -1;
  for (int pass = 0; pass < 2 && found < 0; pass++)
    for (int i = 0; i < n && found < 0; i++)
      if ((strchr(rows[i].path, ':') != NULL) == pass &&
          matches(rows[i].path, path, len, &at, &plen))
        found = i;
  if (found < 0) return EPHD_E_NOT_FOUND;
  int head = 0;
  for (int i = 0; i < n; i++) {
    /* The same path: the same pattern once its parameter's name is gone. */
    size_t a, b, c, d;
    const char *p = rows[i].path, *q = rows[found].path;
    int same = strchr(p, ':')
                   ? (strchr(q, ':') && matches(p, q, strlen(q), &a, &b) &&
                      matches(q, p, strlen(p), &c, &d) && a == c)
                   : strcmp(p, q) == 0;
    if (!same) continue;
    if (strcmp(rows[i].method, method) == 0) {
      *route = i + 1;
      return EPHD_OK;
    }
    if (rows[i].head) head = i + 1;
  }
  if (head && strcmp(method, "HEAD") == 0) {
    *route = head;
    return EPHD_OK;
  }
  return EPHD_E_NOT_ALLOWED;
}

static int parse_rows(const char **s, const char *end, row_t *rows) {
  int n = 0;
  while (*s < end) {
    const char *nl = memchr(*s, '\n', (size_t)(end - *s));
    if (nl == NULL) return -1;
    if (nl == *s) {
      (*s)++;
      return n;
    }
    if (n == MAX_ROWS) return -1;
    char line[320];
    size_t len = (size_t)(nl - *s);
    if (len >= sizeof(line)) return -1;
    memcpy(line, *s, len);
    line[len] = '\0';
    *s = nl + 1;
    row_t *r = &rows[n++];
    char head[8] = "";
    if (sscanf(line, "%63s %255s %7s", r->method, r->path, head) < 2) return -1;
    r->head = strcmp(head, "head") == 0;
  }
  return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *s = (const char *)data, *end = s + size;
  row_t rows[MAX_ROWS];
  int n = parse_rows(&s, end, rows);
  if (n < 0) {
    s = (const char *)data;
    n = (int)(sizeof(broker) / sizeof(broker[0]));
    memcpy(rows, broker, sizeof(broker));
  }
  ephd_route_row_t defs[MAX_ROWS];
  for (int i = 0; i < n; i++) {
    defs[i].method = rows[i].method;
    defs[i].path = rows[i].path;
    defs[i].head = rows[i].head;
  }
  /* The broker's table first, so a refused table has one to leave. */
  ephd_route_row_t base[sizeof(broker) / sizeof(broker[0])];
  int nbase = (int)(sizeof(broker) / sizeof(broker[0]));
  for (int i = 0; i < nbase; i++) {
    base[i].method = broker[i].method;
    base[i].path = broker[i].path;
    base[i].head = broker[i].head;
  }
  if (ephd_ffi_routes_define(base, nbase) != EPHD_OK) abort();
  if (ephd_ffi_routes_define(defs, n) != EPHD_OK) {
    n = nbase;
    memcpy(rows, broker, sizeof(broker));
  }

  /* The request: a method up to the first space, the path after it, in
   * copies of exactly their size so a read past either is caught. */
  const char *sp = memchr(s, ' ', (size_t)(end - s));
  if (sp == NULL) return 0;
  size_t mlen = (size_t)(sp - s), plen = (size_t)(end - sp - 1);
  if (mlen >= 64) return 0;
  char method[64];
  memcpy(method, s, mlen);
  method[mlen] = '\0';
  char *mcopy = malloc(mlen ? mlen : 1), *path = malloc(plen ? plen : 1);
  memcpy(mcopy, s, mlen);
  memcpy(path, sp + 1, plen);
  ephd_request_t req;
  memset(&req, 0, sizeof(req));
  req.method.ptr = mcopy;
  req.method.len = mlen;
  req.path.ptr = path;
  req.path.len = plen;
  ephd_route_match_t m;
  int rc = ephd_ffi_route(&req, &m);
  int want_route = 0;
  if (memchr(mcopy, '\0', mlen)) {
    /* A method holding a NUL is none of the table's. */
    if (rc == EPHD_OK) abort();
  } else {
    int want = reference(rows, n, method, path, plen, &want_route);
    if (rc != want || (rc == EPHD_OK && m.route != want_route)) abort();
  }
  if (rc != EPHD_E_NOT_FOUND) {
    if (m.route < 1 || m.route > n) abort();
    size_t at, len;
    if (!matches(rows[m.route - 1].path, path, plen, &at, &len) ||
        (strchr(rows[m.route - 1].path, ':') &&
         (m.param.ptr != path + at || m.param.len != len)))
      abort();
  }
  free(mcopy);
  free(path);
  return 0;
}
