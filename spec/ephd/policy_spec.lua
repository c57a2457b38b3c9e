local helper = require("helper")
local policy = require("ephd.policy")

local function dir(files)
    local d = os.tmpname()
    os.remove(d)
    assert(os.execute("mkdir -p " .. d) == 0)
    for name, text in pairs(files) do
        local f = assert(io.open(d .. "/" .. name, "w"))
        f:write(text)
        f:close()
    end
    return d
end

describe("ephd.policy", function()
    it("loads the default policy", function()
        local p = assert(policy.load(helper.root .. "/policies/default"))
        assert.equals("default", p.name)
        assert.is_function(p.hooks.authenticate)
    end)

    it("lets a policy require its own files", function()
        local p = assert(policy.load(dir({
            ["init.lua"] = 'local t = require("tokens") return { name = "x", '
                           .. 'version = 1, hooks = { authenticate = function() '
                           .. 'return t.code end } }',
            ["tokens.lua"] = 'return { code = "feature_gated" }',
        })))
        assert.equals("feature_gated", p.hooks.authenticate())
    end)

    it("runs policy code without io, os, ffi or debug", function()
        for _, lib in ipairs({ "io", "os", "debug", "require('ffi')" }) do
            local p, err = policy.load(dir({
                ["init.lua"] = "local x = " .. lib .. ".open return {}",
            }))
            assert.is_nil(p, lib)
            assert.is_string(err)
        end
    end)

    it("refuses a directory whose init.lua is missing or wrong", function()
        assert.is_nil((policy.load("/nonexistent")))
        assert.is_nil((policy.load(dir({ ["init.lua"] = "return 1" }))))
        assert.is_nil((policy.load(dir({ ["init.lua"] = "error('boom')" }))))
        assert.is_nil((policy.load(dir({
            ["init.lua"] = 'return { name = "x", version = 1, hooks = { '
                           .. 'nohook = function() end } }' }))))
        assert.is_nil((policy.load(dir({
            ["init.lua"] = 'return { name = "x", version = 1, hooks = { '
                           .. 'authenticate = 5 } }' }))))
    end)

    it("refuses requires outside the directory", function()
        assert.is_nil((policy.load(dir({
            ["init.lua"] = 'require("../../etc/passwd") return {}' }))))
    end)
end)
