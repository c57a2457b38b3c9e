local helper = require("helper")

describe("ephd.hooks", function()
    local hooks, brackets
    before_each(function()
        brackets = {}
        helper.core_double({
            ephd_ffi_now_ms = function() return 0ULL end,
            ephd_ffi_policy_enter = function() brackets[#brackets + 1] = "in" end,
            ephd_ffi_policy_leave = function() brackets[#brackets + 1] = "out" end,
        })
        hooks = require("ephd.hooks")
        hooks.active = { hooks = {
            fine = function(a, b) return a + b, "x" end,
            broken = function() error("boom") end,
        }, guarded = { broken = true } }
    end)

    it("returns a hook's results", function()
        assert.same({ true, 3, "x" }, { hooks.call("fine", 1, 2) })
    end)

    it("answers true and nothing for a hook the policy lacks", function()
        assert.same({ true }, { hooks.call("absent") })
    end)

    it("contains and counts a hook that raises", function()
        assert.is_false((hooks.call("broken")))
        assert.is_false((hooks.call("broken")))
        assert.equals(2, hooks.failures.broken)
    end)

    it("logs a huge error of a hook's as an excerpt", function()
        local fields
        helper.core_double({
            ephd_ffi_now_ms = function() return 0ULL end,
            ephd_ffi_policy_enter = function() end,
            ephd_ffi_policy_leave = function() end,
            ephd_ffi_log_fields = function(_, _, f) fields = f end,
        })
        hooks = require("ephd.hooks")
        hooks.active = { hooks = {
            huge = function() error(string.rep("x", 1000000), 0) end,
        }, guarded = { huge = true } }
        assert.is_false((hooks.call("huge")))
        assert.truthy(#fields < 600, #fields)
        assert.truthy(fields:find("(1000000 bytes)", 1, true))
    end)

    it("runs the operator's hooks inside the watchdog's brackets only",
       function()
        hooks.call("fine", 1, 2)
        assert.same({}, brackets)
        hooks.call("broken")
        assert.same({ "in", "out" }, brackets)
    end)
end)
