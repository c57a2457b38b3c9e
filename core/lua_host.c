#include "lua_host.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

static lua_State *L;
static int dispatch_ref = LUA_NOREF;
static int apply_ref = LUA_NOREF;
static int traceback_ref = LUA_NOREF;
static uint64_t failures, last_logged_ms;

static int set_path(lua_State *l, const char *prefix) {
  lua_getglobal(l, "package");
  lua_getfield(l, -1, "path");
  lua_pushfstring(l, "%s;%s", prefix, lua_tostring(l, -1));
  lua_setfield(l, -3, "path");
  lua_pop(l, 2);
  return 0;
}

int ephd_lua_host_start(const char *lua_path, const char *policy_dir, char *err,
                        size_t errlen) {
  L = luaL_newstate();
  if (L == NULL) {
    snprintf(err, errlen, "cannot create the Lua state");
    return -1;
  }
  luaL_openlibs(L);
  set_path(L, lua_path);
  lua_getglobal(L, "debug");
  lua_getfield(L, -1, "traceback");
  traceback_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pop(L, 1);

  lua_getglobal(L, "require");
  lua_pushliteral(L, "ephd.dispatch");
  if (lua_pcall(L, 1, 1, 0) != 0) {
    snprintf(err, errlen, "loading ephd.dispatch: %s", lua_tostring(L, -1));
    return -1;
  }
  lua_getfield(L, -1, "init");
  lua_pushstring(L, policy_dir);
  if (lua_pcall(L, 1, 2, 0) != 0 || lua_isnil(L, -2)) {
    snprintf(err, errlen, "loading policy %s: %s", policy_dir,
             lua_tostring(L, -1));
    return -1;
  }
  lua_pop(L, 2);
  lua_getfield(L, -1, "dispatch");
  dispatch_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_getfield(L, -1, "apply_declarations");
  apply_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pop(L, 1);
  return 0;
}

void ephd_lua_host_apply_declarations(void) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, traceback_ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, apply_ref);
  if (lua_pcall(L, 0, 0, -2) != 0) {
    fprintf(stderr, "ephd: applying declarations failed: %s\n",
            lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

void ephd_lua_host_dispatch(const ephd_request_t *req) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, traceback_ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, dispatch_ref);
  lua_pushlightuserdata(L, (void *)req);
  if (lua_pcall(L, 1, 0, -3) != 0) {
    /* A Lua fault is the cell's problem, not the client's: the HTTP layer
     * answers 503 when nothing was written. Logged once per second at most,
     * so a broken handler cannot flood the log. */
    failures++;
    uint64_t now = uv_hrtime() / 1000000;
    if (now - last_logged_ms >= 1000) {
      fprintf(stderr, "ephd: lua dispatch failed (%llu so far): %s\n",
              (unsigned long long)failures, lua_tostring(L, -1));
      last_logged_ms = now;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

void ephd_lua_host_close(void) {
  if (L) lua_close(L);
  L = NULL;
}
