/* The policy watchdog: a hook that never returns must not take the broker
 * with it. Lua brackets each hook call with ephd_policy_enter/leave (a
 * deadline in an atomic); a thread checks it every few milliseconds and,
 * past it, signals the loop thread, whose handler sets a Lua debug hook
 * that raises inside the policy code. LuaJIT's compiled code never checks
 * debug hooks, which is why policy code is loaded with the JIT off. */
#ifndef EPHD_WATCHDOG_H
#define EPHD_WATCHDOG_H

#include <lua.h>
#include <stdint.h>

int ephd_watchdog_start(lua_State *L, uint64_t budget_ms);
void ephd_watchdog_stop(void);
uint64_t ephd_watchdog_interrupts(void);

#endif
