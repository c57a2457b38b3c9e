-- The boundary cannot drift: every function of core/ffi.h is exported by
-- the daemon, nothing else of ours is, and the Lua side refuses to load
-- against a binary that lacks one.
local helper = require("helper")

local function exported()
    local p = io.popen("nm -D --defined-only " .. helper.build .. "/ephd")
    local names = {}
    for line in p:lines() do
        local name = line:match(" T (ephd_[%w_]+)$")
        if name then names[#names + 1] = name end
    end
    p:close()
    table.sort(names)
    return names
end

local function declared()
    local names = {}
    local abi = require("ephd.abi"):gsub("/%*.-%*/", "")
    for name in abi:gmatch("(ephd_[%w_]+)%s*%(") do
        names[#names + 1] = name
    end
    table.sort(names)
    return names
end

describe("ephd.core", function()
    it("declares exactly the functions the daemon exports", function()
        local d = declared()
        assert.is_true(#d > 10)
        assert.same(d, exported())
    end)

    it("refuses to load where the functions are not exported", function()
        package.loaded["ephd.core"] = nil
        local ok, err = pcall(require, "ephd.core")
        assert.is_false(ok)
        assert.truthy(tostring(err):find("not exported by this binary", 1,
                                         true))
    end)
end)
