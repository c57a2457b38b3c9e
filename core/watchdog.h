/* The policy watchdog: a hook that never returns, or that allocates
 * without end, must not take the broker with it. Lua brackets each hook
 * call with ephd_ffi_policy_enter/leave. Between the two, the state's
 * allocator refuses to grow it past a cap, and a deadline sits in an
 * atomic: a thread checks it every few milliseconds and, past it, signals
 * the loop thread, whose handler sets a Lua debug hook that raises inside
 * the policy code. LuaJIT's compiled code never checks debug hooks, which
 * is why policy code is loaded with the JIT off. The hook stays until the
 * policy code is left, raising at each of its instructions, so no pcall
 * inside it can swallow the interrupt. */
#ifndef EPHD_WATCHDOG_H
#define EPHD_WATCHDOG_H

#include <lua.h>
#include <stdint.h>

/* Whose code the interrupt raises in: the live policy's directory and a
 * shadow policy's (ephd.shadow), each judged under the same budget. */
typedef enum {
  EPHD_GUARD_LIVE,
  EPHD_GUARD_SHADOW,
  EPHD_GUARD_SLOTS
} ephd_guard_slot_t;

/* policy_dir: the operator's directory, whose code (chunks named
 * "@policy_dir/...") the interrupt keeps raising in until it is left.
 * max_mem: the most bytes the state may hold while policy code runs (0:
 * no cap). */
int ephd_watchdog_start(lua_State *L, uint64_t budget_ms, uint64_t max_mem,
                        const char *policy_dir);
/* Whether the loop thread is inside policy code, and whether that code is
 * past its budget (for C the policy calls, such as its pattern matcher, which
 * no debug hook reaches). */
int ephd_policy_running(void);
/* Sets (NULL: clears) the directory of a slot: at a shadow's load, its
 * removal and a promotion (the shadow's directory becomes the live one). */
void ephd_watchdog_guard(ephd_guard_slot_t slot, const char *dir);
int ephd_policy_overran(void);
void ephd_watchdog_stop(void);
uint64_t ephd_watchdog_interrupts(void);

#endif
