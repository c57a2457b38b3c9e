/* Lua's pattern functions (string.find, match, gmatch, gsub) for policy
 * code, with the time budget inside them. LuaJIT's matcher is C that no
 * debug hook reaches, and a pattern such as ("a*"):rep(20) .. "b" against a
 * few dozen bytes backtracks for seconds; this one counts its steps and,
 * once the policy code it serves is past its budget, raises like the
 * watchdog's interrupt. Same language as LuaJIT's (Lua 5.1 patterns). */
#ifndef EPHD_PATTERNS_H
#define EPHD_PATTERNS_H

#include <lua.h>

/* Replaces find, match, gmatch and gsub in the state's string table (the
 * one string methods and policy sandboxes use). */
void ephd_patterns_install(lua_State *L);

/* The functions themselves, for a test harness. */
int ephd_patterns_open(lua_State *L);

#endif
