local helper = require("helper")

-- core/lua_host.c finds its Lua entry points by name in ephd.host: every
-- name it asks for is a function there, so a module split or a rename
-- cannot leave C calling nil at boot, a reload or a metering tick.
describe("ephd.host", function()
    it("has every function core/lua_host.c calls", function()
        local f = assert(io.open(helper.root .. "/core/lua_host.c"))
        local c = f:read("*a")
        f:close()
        local names = {}
        for name in c:gmatch('call_simple%("([%w_]+)"%)') do
            names[name] = true
        end
        for name in c:gmatch('%.fn = "([%w_]+)"') do names[name] = true end
        for name in c:gmatch('call_load%(%w+, "([%w_]+)"') do
            names[name] = true
        end
        -- Fields read off the table on the stack, but for the standard
        -- library's (debug.traceback, package.path) and ephd.cli's main,
        -- another state's.
        local others = { traceback = true, path = true, main = true }
        for name in c:gmatch('lua_getfield%(%w+, %-1, "([%w_]+)"%)') do
            if not others[name] then names[name] = true end
        end
        assert.truthy(c:find('"ephd.host"', 1, true))
        helper.core_double({})
        local host = require("ephd.host")
        local n = 0
        for name in pairs(names) do
            n = n + 1
            assert.equals("function", type(host[name]), name)
        end
        -- dispatch, observe, init, reload, check, shadow, meter,
        -- apply_declarations, apply_grants, refund
        assert.equals(10, n)
    end)
end)
