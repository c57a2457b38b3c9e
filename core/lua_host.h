/* The embedded LuaJIT state: loads lua/ephd and the policy directory at boot,
 * and makes exactly one call into Lua per request (dispatch). */
#ifndef EPHD_LUA_HOST_H
#define EPHD_LUA_HOST_H

#include <stddef.h>

#include "ffi.h"

/* lua_path is a ';'-separated package.path prefix where ephd.* lives. */
int ephd_lua_host_start(const char *lua_path, const char *policy_dir, char *err,
                        size_t errlen);
void ephd_lua_host_dispatch(const ephd_request_t *req);
/* Hands a load of declarations to Lua, which validates, clamps and applies
 * each row. Runs at boot and each refresh, never per request. */
void ephd_lua_host_apply_declarations(void);
void ephd_lua_host_close(void);

#endif
