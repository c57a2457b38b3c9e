/* The embedded LuaJIT state: loads lua/ephd and the policy directories,
 * makes exactly one call into Lua per request (dispatch), and the few
 * control-plane calls: declarations and grants loaded, policy reloaded
 * or shadowed (files read off the loop), metering ticks. */
#ifndef EPHD_LUA_HOST_H
#define EPHD_LUA_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "ffi.h"

/* lua_path is a ';'-separated package.path prefix where ephd.* lives.
 * Hooks the operator's policy_dir does not define come from default_dir. */
/* budget_ms bounds each call into policy code, max_bytes (0: none) the Lua
 * state while policy code runs. shadow_dir (NULL: none) is a candidate
 * judged beside the live policy (ephd.shadow); one that does not load
 * refuses the boot, as a policy_dir that does not. */
int ephd_lua_host_start(uv_loop_t *loop, const char *lua_path,
                        const char *policy_dir, const char *shadow_dir,
                        const char *default_dir, uint64_t meter_ms,
                        uint64_t budget_ms, uint64_t max_bytes, char *err,
                        size_t errlen);
void ephd_lua_host_dispatch(ephd_request_t *req);
void ephd_lua_host_apply_declarations(void);
void ephd_lua_host_apply_grants(void);
/* Gives a tenant back rate it was charged (a relayed push its owner
 * refused: core/cell/relay_edge.h). */
void ephd_lua_host_refund(const char *tenant, size_t tenant_len, uint32_t cost);
/* SIGHUP: reload, logging the outcome. */
void ephd_lua_host_reload(void);
/* A full garbage collection: after a crowd left, before trimming the heap. */
void ephd_lua_host_collect(void);
void ephd_lua_host_close(void);

/* `ephd policy check DIR`: loads DIR the way the broker would and prints
 * what is wrong; returns the exit status. */
int ephd_lua_host_check(const char *lua_path, const char *dir,
                        const char *default_dir, uint64_t budget_ms,
                        uint64_t max_bytes);

/* `ephd status` and `ephd policy test`: runs ephd.cli in a plain LuaJIT
 * state (no broker) with argv from the command on; returns the exit
 * status. */
int ephd_lua_host_cli(const char *lua_path, int argc, char **argv);

#endif
