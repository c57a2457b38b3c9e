local helper = require("helper")

describe("ephd.limits", function()
    local limits, hooks, grants, asked
    before_each(function()
        helper.core_double({ ephd_ffi_now_ms = function() return 0ULL end },
                           { rate = 10, burst = 20, max_parked = 30,
                             tenant_max_queues = 40 })
        limits = require("ephd.limits")
        hooks = require("ephd.hooks")
        grants = require("ephd.grants")
        asked = 0
        hooks.active = { hooks = { limits = function(tenant, grant, d)
            asked = asked + 1
            if tenant == "bad" then return { rate = -1 } end
            return { rate = grant and grant.max_msgs_per_sec or d.rate,
                     burst = d.burst, max_parked = d.max_parked,
                     max_bytes = 100 }
        end }, guarded = {} }
    end)

    it("asks the policy once per tenant, in the form C takes", function()
        local l = limits.get("t")
        assert.equals(10, l.rate)
        assert.equals(20, l.burst)
        assert.equals(100, tonumber(l.c.max_bytes))
        assert.equals(0, tonumber(l.c.max_queues))
        assert.equals(30, tonumber(l.c.max_parked))
        limits.get("t")
        assert.equals(1, asked)
    end)

    it("asks again after being told to forget (reload, grants)", function()
        limits.get("t")
        grants.replace({ t = { enabled = true, max_msgs_per_sec = 3 } })
        limits.forget()
        assert.equals(3, limits.get("t").rate)
        assert.equals(2, asked)
    end)

    it("treats limits of the wrong shape as a failed hook", function()
        assert.is_nil(limits.get("bad"))
        assert.equals(1, hooks.failures.limits)
    end)

    it("refuses NaN, infinities and fractions, caching nothing", function()
        local answers = {
            nan = { rate = 0 / 0 }, inf = { rate = math.huge },
            ninf = { burst = -math.huge }, bytes = { max_bytes = 1 / 0 },
            half = { max_queues = 1.5 }, big = { max_parked = 2 ^ 64 },
        }
        hooks.active = { hooks = { limits = function(tenant)
            asked = asked + 1
            return answers[tenant]
        end }, guarded = {} }
        for tenant in pairs(answers) do
            assert.is_nil(limits.get(tenant), tenant)
        end
        assert.is_nil(limits.get("nan"))
        assert.equals(7, asked)
    end)

    it("hands the policy the knobs, the queue allowance with them",
       function()
        local seen
        hooks.active = { hooks = { limits = function(_, _, d)
            seen = d
            return {}
        end }, guarded = {} }
        limits.get("t")
        assert.same({ rate = 10, burst = 20, max_parked = 30,
                      max_queues = 40 }, seen)
    end)

    it("bounds a rate's burst by the rate when the policy names none",
       function()
        hooks.active = { hooks = { limits = function()
            return { rate = 5 }
        end }, guarded = {} }
        assert.equals(5, limits.get("t").burst)
    end)
end)
