rockspec_format = "3.0"
package = "ephd"
version = "scm-1"
source = {
    url = "git+file://.",
}
description = {
    summary = "The Lua side of ephd, an in-memory ephemeral queue broker",
    detailed = [[
The broker's own Lua modules (ephd.*, including ephd.abi generated from
core/ffi.h) and the daemon, built with CMake.]],
    license = "MIT",
}
-- LuaJIT (Lua 5.1); ephd.client needs luasocket and lua-cjson, which
-- Debian ships as lua-socket and lua-cjson (scripts/rock-check installs
-- with --deps-mode=none against those).
dependencies = {
    "lua == 5.1",
    "luasocket",
    "lua-cjson",
}
build = {
    type = "cmake",
    variables = {
        CMAKE_INSTALL_PREFIX = "$(PREFIX)",
        EPHD_LUADIR = "$(LUADIR)",
        BUILD_TESTING = "OFF",
    },
}
test = {
    type = "busted",
    flags = { "--run=unit" },
}
