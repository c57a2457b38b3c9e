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
static int dispatch_ref = LUA_NOREF;
/* ephd.dispatch.dispatch itself: fetched once, not by name per request. */
static int dispatch_fn_ref = LUA_NOREF;
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

/* Calls ephd.dispatch[fn] with (policy_dir, files, default_dir, files);
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
  lua_rawgeti(l, LUA_REGISTRYINDEX, dispatch_ref);
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
  lua_pushliteral(l, "ephd.dispatch");
  if (lua_pcall(l, 1, 1, 0) != 0) {
    snprintf(err, errlen, "loading ephd.dispatch: %s", lua_tostring(l, -1));
    lua_close(l);
    return NULL;
  }
  lua_getfield(l, -1, "dispatch");
  dispatch_fn_ref = luaL_ref(l, LUA_REGISTRYINDEX);
  dispatch_ref = luaL_ref(l, LUA_REGISTRYINDEX);
  /* After the broker's modules took the built-in matcher as locals: what
   * policy code reaches (its sandbox copies and string methods) is the
   * matcher that stops at the budget. */
  ephd_patterns_install(l);
  return l;
}

static void call_simple(const char *fn) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, traceback_ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, dispatch_ref);
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

int ephd_lua_host_start(uv_loop_t *lp, const char *lua_path, const char *pdir,
                        const char *ddir, uint64_t meter_ms, uint64_t budget_ms,
                        uint64_t max_bytes, char *err, size_t errlen) {
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
  if (rc != 0) {
    snprintf(err, errlen, "policy %s: %s", pdir, why);
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
  char v[32];
  snprintf(v, sizeof(v), "%g", version);
  ephd_log("info", "policy_loaded", "name", name, "version", v, "dir", pdir,
           NULL);
  uv_timer_init(loop, &meter_timer);
  uv_timer_start(&meter_timer, on_meter, meter_ms, meter_ms);
  uv_unref((uv_handle_t *)&meter_timer);
  return 0;
}

void ephd_lua_host_dispatch(ephd_request_t *req) {
  /* Lua's ctx.op: this request's own, until it is answered. */
  ephd_op_attach(req);
  lua_rawgeti(L, LUA_REGISTRYINDEX, traceback_ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, dispatch_fn_ref);
  current = req;
  int rc = lua_pcall(L, 0, 0, -2);
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
  lua_rawgeti(L, LUA_REGISTRYINDEX, dispatch_ref);
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

/* --- reload --------------------------------------------------------------*/

typedef struct {
  uv_work_t work;
  /* The admin request held for the outcome; NULL for SIGHUP, or once its
   * client left. */
  ephd_deferred_t *held;
  dir_t policy, fallback;
} reload_t;

static reload_t *reloading;

static void reload_work(uv_work_t *w) {
  reload_t *r = w->data;
  read_dir(policy_dir, &r->policy);
  read_dir(default_dir, &r->fallback);
}

static void answer_reload(ephd_conn_t *c, int ok, const char *name,
                          double version, const char *why) {
  if (!ok) {
    char msg[600];
    snprintf(msg, sizeof(msg),
             "the policy did not load, the previous one stays: %s", why);
    ephd_http_refuse(c, EPHD_CODE_EPHEMERAL_BAD_REQUEST, msg);
    return;
  }
  char v[32];
  snprintf(v, sizeof(v), "%g", version);
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"reloaded\":true,\"policy\":{\"name\":");
  ephd_json_write_string(out, name, strlen(name));
  ephd_buf_appends(out, ",\"version\":");
  ephd_buf_appends(out, v);
  ephd_buf_appends(out, "}}");
  ephd_http_end(c);
}

static void after_reload(uv_work_t *w, int status) {
  reload_t *r = w->data;
  reloading = NULL;
  char name[128] = "", why[400] = "";
  double version = 0;
  int rc = status == 0 ? call_load(L, "reload", policy_dir, &r->policy,
                                   default_dir, &r->fallback, why, sizeof(why),
                                   name, sizeof(name), &version)
                       : -1;
  if (status != 0) snprintf(why, sizeof(why), "%s", uv_strerror(status));
  char v[32];
  snprintf(v, sizeof(v), "%g", version);
  if (rc == 0)
    ephd_log("info", "policy_reloaded", "name", name, "version", v, NULL);
  else
    ephd_log("warn", "policy_reload_refused", "reason", why, "msg",
             "keeping the old policy", NULL);
  if (r->held)
    answer_reload(ephd_deferred_conn(r->held), rc == 0, name, version, why);
  dir_free(&r->policy);
  dir_free(&r->fallback);
  free(r);
}

static void on_reloader_left(void *data) {
  reload_t *r = data;
  r->held = NULL;
}

/* The reload runs on whatever happens to its requester; at the broker's
 * stop the request is cut off. */
static const ephd_deferred_ops_t RELOAD_HELD = {.cancel = on_reloader_left};

static int start_reload(const ephd_request_t *req) {
  if (reloading) return -1;
  reload_t *r = calloc(1, sizeof(*r));
  if (r == NULL) abort();
  r->work.data = r;
  if (req) r->held = ephd_http_defer(req, &RELOAD_HELD, r);
  reloading = r;
  uv_queue_work(loop, &r->work, reload_work, after_reload);
  return 0;
}

int ephd_ffi_policy_reload(const ephd_request_t *req) {
  if (start_reload(req) != 0) return EPHD_E_UNAVAILABLE;
  return EPHD_HELD;
}

void ephd_lua_host_reload(void) {
  if (start_reload(NULL) != 0) ephd_log("warn", "policy_reload_busy", NULL);
}

void ephd_lua_host_collect(void) { lua_gc(L, LUA_GCCOLLECT, 0); }

void ephd_lua_host_close(void) {
  ephd_watchdog_stop();
  if (L) lua_close(L);
  L = NULL;
  if (policy_dir) uv_close((uv_handle_t *)&meter_timer, NULL);
  free(policy_dir);
  free(default_dir);
  policy_dir = default_dir = NULL;
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
