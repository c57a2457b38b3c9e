/* The policy pattern matcher as a Lua module, so busted specs can hold it
 * to LuaJIT's own (spec/ephd/patterns_spec.lua). The watchdog's objects
 * come along: the matcher asks them whether its budget is spent. */
#include <lua.h>

#include "patterns.h"

__attribute__((visibility("default"))) int luaopen_ephd_patterns(lua_State *L) {
  return ephd_patterns_open(L);
}
