#include "lua_host.h"

#include <dirent.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "errors.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "op.h"
#include "patterns.h"
#include "watchdog.h"

#define MAX_POLICY_FILE (1 << 20)
#define MAX_POLICY_FILES 256

static lua_State *L;
static uv_loop_t *loop;
static int traceback_ref = LUA_NOREF;
/* ephd.host: the table of the functions C calls, by name. */
static int host_ref = LUA_NOREF;
/* Its dispatch itself: fetched once, not by name per request; and its
 * observe, called after it while a shadow is loaded. */
static int dispatch_fn_ref = LUA_NOREF, observe_fn_ref = LUA_NOREF;
static uint64_t failures, last_logged_ms;
static char *policy_dir, *default_dir;
static const ephd_request_t *current;

const ephd_request_t *const *ephd_ffi_request_slot(void) { return &current; }
static uv_timer_t meter_timer;

/* --- policy files -------------------------------------------------------
 * A policy directory is read whole (its *.lua files) into memory, then
 * compiled by Lua from there, so a reload reads the disk on a worker thread
 * and never on the loop. */

typedef struct {
  char *name; /* without .lua */
  char *text;
  size_t len;
} file_t;

typedef struct {
  file_t files[MAX_POLICY_FILES];
  int count;
  char error[256];
} dir_t;

static void dir_free(dir_t *d) {
  for (int i = 0; i < d->count; i++) {
    free(d->files[i].name);
    free(d->files[i].text);
  }
  d->count = 0;
}

static int module_name(const char *file, size_t *stem) {
  size_t n = strlen(file);
  if (n < 5 || strcmp(file + n - 4, ".lua") != 0) return 0;
  for (size_t i = 0; i < n - 4; i++) {
    char c = file[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_'))
      return 0;
  }
  *stem = n - 4;
  return 1;
}

/* Blocking: runs at boot, in `policy check`, or on a worker thread. */
static int read_dir(const char *path, dir_t *d) {
  d->count = 0;
  d->error[0] = 0;
  DIR *dir = opendir(path);
  if (dir == NULL) {
    snprintf(d->error, sizeof(d->error), "cannot open %s", path);
    return -1;
  }
  struct dirent *ent;
  while ((ent = readdir(dir)) && d->count < MAX_POLICY_FILES) {
    size_t stem;
    if (!module_name(ent->d_name, &stem)) continue;
    char full[4096];
    snprintf(full, sizeof(full), "%s/%s", path, ent->d_name);
    struct stat st;
    if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (st.st_size > MAX_POLICY_FILE) {
      snprintf(d->error, sizeof(d->error), "%.200s is larger than %d bytes",
               full, MAX_POLICY_FILE);
      break;
    }
    FILE *f = fopen(full, "rb");
    if (f == NULL) continue;
    file_t *file = &d->files[d->count];
    file->text = malloc((size_t)st.st_size + 1);
    file->name = malloc(stem + 1);
    if (file->text == NULL || file->name == NULL) abort();
    file->len = fread(file->text, 1, (size_t)st.st_size, f);
    fclose(f);
    memcpy(file->name, ent->d_name, stem);
    file->name[stem] = 0;
    d->count++;
  }
  closedir(dir);
  return d->error[0] ? -1 : 0;
}

static void push_files(lua_State *l, const dir_t *d) {
  lua_createtable(l, 0, d->count);
  for (int i = 0; i < d->count; i++) {
    lua_pushlstring(l, d->files[i].text, d->files[i].len);
    lua_setfield(l, -2, d->files[i].name);
  }
}

/* Calls ephd.host[fn] with (policy_dir, files, default_dir, files);
 * returns 0 and leaves the policy's name and version in name and version, or
 * -1 with the reason in err. */
static int call_load(lua_State *l, const char *fn, const char *pdir,
                     const dir_t *pfiles, const char *ddir, const dir_t *dfiles,
                     char *err, size_t errlen, char *name, size_t namelen,
                     double *version) {
  if (pfiles->error[0] || dfiles->error[0]) {
    snprintf(err, errlen, "%s",
             pfiles->error[0] ? pfiles->error : dfiles->error);
    return -1;
  }
  lua_rawgeti(l, LUA_REGISTRYINDEX, traceback_ref);
  lua_rawgeti(l, LUA_REGISTRYINDEX, host_ref);
  lua_getfield(l, -1, fn);
  lua_remove(l, -2);
  lua_pushstring(l, pdir);
  push_files(l, pfiles);
  lua_pushstring(l, ddir);
  push_files(l, dfiles);
  int rc = 0;
  if (lua_pcall(l, 4, 3, -6) != 0) {
    snprintf(err, errlen, "%s", lua_tostring(l, -1));
    lua_pop(l, 2);
    return -1;
  }
  if (lua_isnil(l, -3)) {
    snprintf(err, errlen, "%s", lua_tostring(l, -2));
    rc = -1;
  } else {
    snprintf(name, namelen, "%s", lua_tostring(l, -2));
    *version = lua_tonumber(l, -1);
  }
  lua_pop(l, 4);
  return rc;
}

/* --- the state ---------------------------------------------------------- */

/* A state with the standard libraries and lua_path before the default
 * path (where Debian's lua-cjson and luasocket are). */
static lua_State *plain_state(const char *lua_path) {
  lua_State *l = luaL_newstate();
  if (l == NULL) return NULL;
  luaL_openlibs(l);
  lua_getglobal(l, "package");
  lua_getfield(l, -1, "path");
  lua_pushfstring(l, "%s;%s", lua_path, lua_tostring(l, -1));
  lua_setfield(l, -3, "path");
  lua_pop(l, 2);
  return l;
}

static lua_State *new_state(const char *lua_path, char *err, size_t errlen) {
  lua_State *l = plain_state(lua_path);
  if (l == NULL) {
    snprintf(err, errlen, "cannot create the Lua state");
    return NULL;
  }
  lua_getglobal(l, "debug");
  lua_getfield(l, -1, "traceback");
  traceback_ref = luaL_ref(l, LUA_REGISTRYINDEX);
  lua_pop(l, 1);
  lua_getglobal(l, "require");
  lua_pushliteral(l, "ephd.host");
  if (lua_pcall(l, 1, 1, 0) != 0) {
    snprintf(err, errlen, "loading ephd.host: %s", lua_tostring(l, -1));
    lua_close(l);
    return NULL;
  }
  lua_getfield(l, -1, "dispatch");
  dispatch_fn_ref = luaL_ref(l, LUA_REGISTRYINDEX);
  lua_getfield(l, -1, "observe");
  observe_fn_ref = luaL_ref(l, LUA_REGISTRYINDEX);
  host_ref = luaL_ref(l, LUA_REGISTRYINDEX);
  /* After the broker's modules took the built-in matcher as locals: what
   * policy code reaches (its sandbox copies and string methods) is the
   * matcher that stops at the budget. */
  ephd_patterns_install(l);
  return l;
}

static void call_simple(const char *fn) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, traceback_ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, host_ref);
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  if (lua_pcall(L, 0, 0, -2) != 0) {
    ephd_log("error", "lua_failed", "call", fn, "error", lua_tostring(L, -1),
             NULL);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

static void on_meter(uv_timer_t *t) {
  (void)t;
  call_simple("meter");
}

static int load_shadow_at_boot(const char *sdir, char *err, size_t errlen);

int ephd_lua_host_start(uv_loop_t *lp, const char *lua_path, const char *pdir,
                        const char *sdir, const char *ddir, uint64_t meter_ms,
                        uint64_t budget_ms, uint64_t max_bytes, char *err,
                        size_t errlen) {
  loop = lp;
  L = new_state(lua_path, err, errlen);
  if (L == NULL) return -1;
  if (ephd_watchdog_start(L, budget_ms, max_bytes, pdir) != 0) {
    snprintf(err, errlen, "cannot start the policy watchdog");
    lua_close(L);
    L = NULL;
    return -1;
  }
  policy_dir = strdup(pdir);
  default_dir = strdup(ddir);
  static dir_t pfiles, dfiles;
  read_dir(pdir, &pfiles);
  read_dir(ddir, &dfiles);
  char name[128];
  double version;
  char why[400];
  int rc = call_load(L, "init", pdir, &pfiles, ddir, &dfiles, why, sizeof(why),
                     name, sizeof(name), &version);
  dir_free(&pfiles);
  dir_free(&dfiles);
  const char *refused = rc != 0 ? pdir : NULL;
  if (rc == 0) {
    char v[32];
    snprintf(v, sizeof(v), "%g", version);
    ephd_log("info", "policy_loaded", "name", name, "version", v, "dir", pdir,
             NULL);
    /* A candidate named at boot must load, as the live policy must. */
    if (sdir && load_shadow_at_boot(sdir, why, sizeof(why)) != 0)
      refused = sdir;
  }
  if (refused) {
    snprintf(err, errlen, "%spolicy %s: %s", refused == sdir ? "shadow " : "",
             refused, why);
    /* The state's memory is the allocator's: give it back, or a boot that
     * fails would leak it. */
    ephd_watchdog_stop();
    lua_close(L);
    L = NULL;
    free(policy_dir);
    free(default_dir);
    policy_dir = default_dir = NULL;
    return -1;
  }
  uv_timer_init(loop, &meter_timer);
  uv_timer_start(&meter_timer, on_meter, meter_ms, meter_ms);
  uv_unref((uv_handle_t *)&meter_timer);
  return 0;
}

/* The shadow's directory while one is loaded (the budget watches its code
 * too); a promotion makes it policy_dir. */
static char *shadow_dir;

/* Calls a function of ephd.host about the request in `current`;
 * returns lua_pcall's status with the error on the stack, under the
 * traceback handler. */
static int call_about(int fn_ref) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, traceback_ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, fn_ref);
  return lua_pcall(L, 0, 0, -2);
}

void ephd_lua_host_dispatch(ephd_request_t *req) {
  /* Lua's ctx.op: this request's own, until it is answered. */
  ephd_op_attach(req);
  current = req;
  int rc = call_about(dispatch_fn_ref);
  /* A shadow judges the request once the live answer is written, in a call
   * of its own: the live path's trace is the same with or without one. */
  if (rc == 0 && shadow_dir) {
    lua_pop(L, 1);
    rc = call_about(observe_fn_ref);
  }
  current = NULL;
  if (rc != 0) {
    /* A Lua fault is the cell's problem, not the client's: the HTTP layer
     * answers 503 when nothing was written. Logged once per second at most,
     * so a broken handler cannot flood the log. */
    failures++;
    uint64_t now = uv_hrtime() / 1000000;
    if (now - last_logged_ms >= 1000) {
      char n[24];
      snprintf(n, sizeof(n), "%llu", (unsigned long long)failures);
      ephd_log("error", "dispatch_failed", "count", n, "error",
               lua_tostring(L, -1), NULL);
      last_logged_ms = now;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

void ephd_lua_host_apply_declarations(void) {
  call_simple("apply_declarations");
}

void ephd_lua_host_apply_grants(void) { call_simple("apply_grants"); }

void ephd_lua_host_refund(const char *tenant, size_t tenant_len,
                          uint32_t cost) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, traceback_ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, host_ref);
  lua_getfield(L, -1, "refund");
  lua_remove(L, -2);
  lua_pushlstring(L, tenant, tenant_len);
  lua_pushinteger(L, (lua_Integer)cost);
  if (lua_pcall(L, 2, 0, -4) != 0) {
    ephd_log("error", "lua_failed", "call", "refund", "error",
             lua_tostring(L, -1), NULL);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* --- loading off the loop: a reload, or a shadow ----------------------
 * Both read a directory and the default on a worker thread, then hand the
 * files to ephd.host on the loop, which swaps in what loads. One runs
 * at a time. */

/* What a load is for: ephd.host's function that takes the files, the
 * log events, and what the held request is told. */
typedef struct {
  const char *fn;
  const char *loaded, *refused, *kept; /* events, and what stays if refused */
  const char *answered;                /* the answer's first field */
} load_kind_t;

static const load_kind_t RELOAD = {
    .fn = "reload",
    .loaded = "policy_reloaded",
    .refused = "policy_reload_refused",
    .kept = "the policy did not load, the previous one stays",
    .answered = "reloaded",
};
static const load_kind_t SHADOW = {
    .fn = "shadow",
    .loaded = "policy_shadow_loaded",
    .refused = "policy_shadow_refused",
    .kept =
        "the candidate policy did not load, the shadow in place (if any) "
        "stays",
    .answered = "shadowed",
};

typedef struct {
  uv_work_t work;
  const load_kind_t *kind;
  /* The admin request held for the outcome; NULL for SIGHUP, or once its
   * client left. */
  ephd_deferred_t *held;
  char *dir; /* what is read: a copy, whatever happens to policy_dir */
  dir_t policy, fallback;
} load_t;

static load_t *loading;
/* A SIGHUP that came while a load ran: the operator's files may have
 * changed after that load read them, so a reload follows it. */
static int reload_pending;
static int start_load(const load_kind_t *kind, const ephd_request_t *req,
                      const char *dir, size_t dir_len);

static void load_work(uv_work_t *w) {
  load_t *r = w->data;
  read_dir(r->dir, &r->policy);
  read_dir(default_dir, &r->fallback);
}

static void answer_load(ephd_conn_t *c, const load_kind_t *kind, int ok,
                        const char *name, double version, const char *why) {
  if (!ok) {
    char msg[600];
    snprintf(msg, sizeof(msg), "%s: %s", kind->kept, why);
    ephd_http_refuse(c, EPHD_CODE_EPHEMERAL_BAD_REQUEST, msg);
    return;
  }
  char v[32];
  snprintf(v, sizeof(v), "%g", version);
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"");
  ephd_buf_appends(out, kind->answered);
  ephd_buf_appends(out, "\":true,\"policy\":{\"name\":");
  ephd_json_write_string(out, name, strlen(name));
  ephd_buf_appends(out, ",\"version\":");
  ephd_buf_appends(out, v);
  ephd_buf_appends(out, "}}");
  ephd_http_end(c);
}

/* Loads r's files with its kind's function. A shadow's code is watched by
 * the budget from its top level on; refused, the watch goes back to the
 * shadow in place. */
static int apply_load(const load_t *r, char *why, size_t whylen, char *name,
                      size_t namelen, double *version) {
  int shadow = r->kind == &SHADOW;
  if (shadow) ephd_watchdog_guard(EPHD_GUARD_SHADOW, r->dir);
  int rc = call_load(L, r->kind->fn, r->dir, &r->policy, default_dir,
                     &r->fallback, why, whylen, name, namelen, version);
  if (shadow && rc == 0) {
    free(shadow_dir);
    shadow_dir = strdup(r->dir);
  } else if (shadow) {
    ephd_watchdog_guard(EPHD_GUARD_SHADOW, shadow_dir);
  }
  return rc;
}

static void after_load(uv_work_t *w, int status) {
  load_t *r = w->data;
  loading = NULL;
  char name[128] = "", why[400] = "";
  double version = 0;
  int rc = status == 0
               ? apply_load(r, why, sizeof(why), name, sizeof(name), &version)
               : -1;
  if (status != 0) snprintf(why, sizeof(why), "%s", uv_strerror(status));
  char v[32];
  snprintf(v, sizeof(v), "%g", version);
  if (rc == 0)
    ephd_log("info", r->kind->loaded, "name", name, "version", v, "dir", r->dir,
             NULL);
  else
    ephd_log("warn", r->kind->refused, "reason", why, "dir", r->dir, "msg",
             r->kind->kept, NULL);
  if (r->held)
    answer_load(ephd_deferred_conn(r->held), r->kind, rc == 0, name, version,
                why);
  dir_free(&r->policy);
  dir_free(&r->fallback);
  free(r->dir);
  free(r);
  if (reload_pending) {
    reload_pending = 0;
    start_load(&RELOAD, NULL, policy_dir, strlen(policy_dir));
  }
}

static void on_loader_left(void *data) {
  load_t *r = data;
  r->held = NULL;
}

/* The load runs on whatever happens to its requester; at the broker's
 * stop the request is cut off. */
static const ephd_deferred_ops_t LOAD_HELD = {.cancel = on_loader_left};

static int start_load(const load_kind_t *kind, const ephd_request_t *req,
                      const char *dir, size_t dir_len) {
  if (loading) return -1;
  load_t *r = calloc(1, sizeof(*r));
  if (r == NULL) abort();
  r->work.data = r;
  r->kind = kind;
  r->dir = strndup(dir, dir_len);
  if (r->dir == NULL) abort();
  if (req) r->held = ephd_http_defer(req, &LOAD_HELD, r);
  loading = r;
  uv_queue_work(loop, &r->work, load_work, after_load);
  return 0;
}

int ephd_ffi_policy_reload(const ephd_request_t *req) {
  if (start_load(&RELOAD, req, policy_dir, strlen(policy_dir)) != 0)
    return EPHD_E_UNAVAILABLE;
  return EPHD_HELD;
}

void ephd_lua_host_reload(void) {
  if (start_load(&RELOAD, NULL, policy_dir, strlen(policy_dir)) != 0) {
    reload_pending = 1;
    ephd_log("info", "policy_reload_queued", "msg",
             "a policy load is running: the reload follows it", NULL);
  }
}

int ephd_ffi_policy_shadow(const ephd_request_t *req, const char *dir,
                           size_t len) {
  if (start_load(&SHADOW, req, dir, len) != 0) return EPHD_E_UNAVAILABLE;
  return EPHD_HELD;
}

int ephd_ffi_policy_shadow_drop(void) {
  ephd_watchdog_guard(EPHD_GUARD_SHADOW, NULL);
  free(shadow_dir);
  shadow_dir = NULL;
  return EPHD_OK;
}

int ephd_ffi_policy_promote(void) {
  if (shadow_dir == NULL) return EPHD_E_NOT_FOUND;
  if (loading) return EPHD_E_UNAVAILABLE;
  free(policy_dir);
  policy_dir = shadow_dir;
  shadow_dir = NULL;
  ephd_watchdog_guard(EPHD_GUARD_LIVE, policy_dir);
  ephd_watchdog_guard(EPHD_GUARD_SHADOW, NULL);
  return EPHD_OK;
}

/* --shadow-policy: read and loaded on the loop, before any request. */
static int load_shadow_at_boot(const char *sdir, char *err, size_t errlen) {
  load_t r = {.kind = &SHADOW, .dir = (char *)sdir};
  read_dir(sdir, &r.policy);
  read_dir(default_dir, &r.fallback);
  char name[128];
  double version;
  int rc = apply_load(&r, err, errlen, name, sizeof(name), &version);
  dir_free(&r.policy);
  dir_free(&r.fallback);
  if (rc == 0) {
    char v[32];
    snprintf(v, sizeof(v), "%g", version);
    ephd_log("info", SHADOW.loaded, "name", name, "version", v, "dir", sdir,
             NULL);
  }
  return rc;
}

void ephd_lua_host_collect(void) { lua_gc(L, LUA_GCCOLLECT, 0); }

void ephd_lua_host_close(void) {
  ephd_watchdog_stop();
  if (L) lua_close(L);
  L = NULL;
  if (policy_dir) uv_close((uv_handle_t *)&meter_timer, NULL);
  free(policy_dir);
  free(default_dir);
  free(shadow_dir);
  policy_dir = default_dir = shadow_dir = NULL;
}

int ephd_lua_host_check(const char *lua_path, const char *dir, const char *ddir,
                        uint64_t budget_ms, uint64_t max_bytes) {
  char err[400];
  L = new_state(lua_path, err, sizeof(err));
  if (L == NULL) {
    fprintf(stderr, "ephd: %s\n", err);
    return 2;
  }
  /* Loading runs the directory's top level: the budget holds here too. */
  if (ephd_watchdog_start(L, budget_ms, max_bytes, dir) != 0) {
    fprintf(stderr, "ephd: cannot start the policy watchdog\n");
    lua_close(L);
    L = NULL;
    return 2;
  }
  static dir_t pfiles, dfiles;
  read_dir(dir, &pfiles);
  read_dir(ddir, &dfiles);
  char name[128];
  double version;
  int rc = call_load(L, "check", dir, &pfiles, ddir, &dfiles, err, sizeof(err),
                     name, sizeof(name), &version);
  dir_free(&pfiles);
  dir_free(&dfiles);
  ephd_watchdog_stop();
  lua_close(L);
  L = NULL;
  if (rc != 0) {
    fprintf(stderr, "%s: %s\n", dir, err);
    return 1;
  }
  printf("%s: ok (policy %s version %g)\n", dir, name, version);
  return 0;
}

int ephd_lua_host_cli(const char *lua_path, int argc, char **argv) {
  lua_State *l = plain_state(lua_path);
  if (l == NULL) return 2;
  int rc = 2;
  lua_getglobal(l, "require");
  lua_pushliteral(l, "ephd.cli");
  if (lua_pcall(l, 1, 1, 0) == 0) {
    lua_getfield(l, -1, "main");
    lua_createtable(l, argc, 0);
    for (int i = 0; i < argc; i++) {
      lua_pushstring(l, argv[i]);
      lua_rawseti(l, -2, i + 1);
    }
    lua_pushstring(l, lua_path);
    if (lua_pcall(l, 2, 1, 0) == 0) rc = (int)lua_tointeger(l, -1);
  }
  if (rc == 2 && lua_isstring(l, -1) && !lua_isnumber(l, -1))
    fprintf(stderr, "ephd: %s\n", lua_tostring(l, -1));
  lua_close(l);
  return rc;
}
