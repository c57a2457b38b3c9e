/* The route matcher. Lua gives it the route table's rows once, at load
 * (lua/ephd/routes.lua, through lua/ephd/router.lua); per request it finds
 * the route of a method and a path with a few length compares and a
 * memcmp, and hands back the :queue segment as a slice of the path. Lua had
 * interned every request's path and method as strings to look them up.
 *
 * Rows with the same path (its shape: a parameter's name does not count)
 * form one path with several methods. A path is exact, or a prefix, one
 * parameter segment and a suffix; the parameter matches any bytes, none
 * and '/' included, since a malformed name is its handler's 400 and a 404
 * would say that the route does not exist. Exact paths are tried first,
 * then the parameterised ones in the table's order. */
#include <string.h>

#include "ffi.h"

#define MAX_PATH 128
#define MAX_METHOD 16

typedef struct {
  char name[MAX_METHOD];
  size_t len;
  int route;
} method_t;

typedef struct {
  char text[MAX_PATH]; /* prefix, then suffix: the parameter cut out */
  size_t prefix_len;   /* the whole path when exact */
  size_t suffix_len;
  int param;
  method_t methods[EPHD_ROUTES_MAX];
  int nmethods;
  int head;  /* the GET route that also answers HEAD; 0: none */
  int first; /* the path's first route: where its Allow list is */
} path_t;

static path_t paths[EPHD_ROUTES_MAX];
static int npaths;

static int is_upper(const char *s) {
  for (; *s; s++)
    if (*s < 'A' || *s > 'Z') return 0;
  return 1;
}

/* Splits a path at its parameter segment ("/:name" up to the next '/' or
 * the end) into p. Returns 0, or -1 for a path the matcher does not take:
 * not starting with '/', too long, a ':' anywhere but at a segment's start,
 * an empty name, or two parameters. */
static int parse_path(const char *path, path_t *p) {
  size_t len = strlen(path);
  if (len == 0 || path[0] != '/' || len >= MAX_PATH) return -1;
  const char *colon = strchr(path, ':');
  memset(p, 0, sizeof(*p));
  if (colon == NULL) {
    memcpy(p->text, path, len);
    p->prefix_len = len;
    return 0;
  }
  const char *end = strchr(colon, '/');
  if (end == NULL) end = path + len;
  if (colon[-1] != '/' || end == colon + 1 || strchr(end, ':') ||
      memchr(colon + 1, ':', (size_t)(end - colon - 1)))
    return -1;
  p->param = 1;
  p->prefix_len = (size_t)(colon - path);
  p->suffix_len = len - (size_t)(end - path);
  memcpy(p->text, path, p->prefix_len);
  memcpy(p->text + p->prefix_len, end, p->suffix_len);
  return 0;
}

static path_t *same_path(path_t *table, int n, const path_t *p) {
  for (int i = 0; i < n; i++) {
    path_t *t = &table[i];
    if (t->param == p->param && t->prefix_len == p->prefix_len &&
        t->suffix_len == p->suffix_len &&
        memcmp(t->text, p->text, p->prefix_len + p->suffix_len) == 0)
      return t;
  }
  return NULL;
}

static method_t *find_method(path_t *p, const char *name, size_t len) {
  for (int i = 0; i < p->nmethods; i++) {
    method_t *m = &p->methods[i];
    if (m->len == len && memcmp(m->name, name, len) == 0) return m;
  }
  return NULL;
}

int ephd_ffi_routes_define(const ephd_route_row_t *rows, int n) {
  /* Built aside and copied in whole: a table refused leaves the one in
   * force. */
  static path_t table[EPHD_ROUTES_MAX];
  int count = 0;
  if (n < 0 || n > EPHD_ROUTES_MAX) return EPHD_E_BAD_REQUEST;
  for (int i = 0; i < n; i++) {
    const ephd_route_row_t *r = &rows[i];
    path_t shape;
    if (r->method == NULL || r->path == NULL || r->method[0] == '\0' ||
        strlen(r->method) >= MAX_METHOD || !is_upper(r->method) ||
        parse_path(r->path, &shape) != 0)
      return EPHD_E_BAD_REQUEST;
    int is_get = strcmp(r->method, "GET") == 0;
    if (r->head && !is_get) return EPHD_E_BAD_REQUEST;
    path_t *p = same_path(table, count, &shape);
    if (p == NULL) {
      p = &table[count++];
      *p = shape;
      p->first = i + 1;
    }
    size_t mlen = strlen(r->method);
    if (find_method(p, r->method, mlen)) return EPHD_E_BAD_REQUEST;
    method_t *m = &p->methods[p->nmethods++];
    memcpy(m->name, r->method, mlen + 1);
    m->len = mlen;
    m->route = i + 1;
    if (r->head) p->head = i + 1;
  }
  memcpy(paths, table, sizeof(path_t) * (size_t)count);
  npaths = count;
  return EPHD_OK;
}

static path_t *find_path(const char *s, size_t len, ephd_slice_t *param) {
  for (int i = 0; i < npaths; i++) {
    path_t *p = &paths[i];
    if (!p->param && p->prefix_len == len && memcmp(p->text, s, len) == 0)
      return p;
  }
  for (int i = 0; i < npaths; i++) {
    path_t *p = &paths[i];
    size_t pre = p->prefix_len, suf = p->suffix_len;
    if (p->param && len >= pre + suf && memcmp(p->text, s, pre) == 0 &&
        memcmp(p->text + pre, s + len - suf, suf) == 0) {
      param->ptr = s + pre;
      param->len = len - pre - suf;
      return p;
    }
  }
  return NULL;
}

int ephd_ffi_route(const ephd_request_t *req, ephd_route_match_t *match) {
  match->route = 0;
  match->param.ptr = "";
  match->param.len = 0;
  path_t *p = find_path(req->path.ptr, req->path.len, &match->param);
  if (p == NULL) return EPHD_E_NOT_FOUND;
  const method_t *m = find_method(p, req->method.ptr, req->method.len);
  if (m) {
    match->route = m->route;
    return EPHD_OK;
  }
  if (p->head && req->method.len == 4 &&
      memcmp(req->method.ptr, "HEAD", 4) == 0) {
    match->route = p->head;
    return EPHD_OK;
  }
  match->route = p->first;
  return EPHD_E_NOT_ALLOWED;
}
