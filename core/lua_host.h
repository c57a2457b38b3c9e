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
void ephd_lua_host_close(void);

#endif
