-- Tenant ids are the client's to choose: what Lua keeps per tenant stays
-- bounded however many ids it has seen, and a refused request keeps
-- nothing. 100,000 distinct tenants each time.
local cjson = require("cjson")
local helper = require("helper")
local testing = require("ephd.testing")

local N = 100000
local DEFAULT = helper.root .. "/policies/default"

local function tenant(i)
    return ("%08x-0000-4000-8000-000000000000"):format(i)
end

describe("per-tenant state", function()
    it("rate buckets: a refilled bucket is forgotten", function()
        helper.core_double({})
        local rate = require("ephd.rate")
        rate.reset()
        -- Each tenant pushes once a millisecond apart; at 10/s with a
        -- burst of 10 its bucket is full again a second later.
        for i = 1, N do
            assert.is_true(rate.take(tenant(i), 1, 10, 10, i))
        end
        assert.is_true(rate.size() <= 2 * rate.SWEEP_FLOOR + 1000,
                       rate.size() .. " buckets")
        -- A tenant over its rate keeps its bucket, and its debt, through
        -- every sweep.
        assert.is_true(rate.take("hog", 10, 10, 10, N))
        for i = 1, N do rate.take(tenant(N + i), 1, 10, 10, N + 500) end
        -- Half a second refilled five tokens; a new bucket would hold ten.
        local ok, wait = rate.take("hog", 6, 10, 10, N + 500)
        assert.is_false(ok)
        assert.equals(1, wait)
    end)

    it("limits: two bounded generations, a busy tenant kept", function()
        helper.core_double({ ephd_ffi_now_ms = function() return 0ULL end })
        local limits = require("ephd.limits")
        local hooks = require("ephd.hooks")
        local asked = 0
        hooks.active = { hooks = { limits = function(_, _, d)
            asked = asked + 1
            return d
        end }, guarded = {} }
        for i = 1, N do
            assert.truthy(limits.get(tenant(i)))
            assert.truthy(limits.get("busy"))
        end
        assert.is_true(limits.size() <= 2 * limits.GENERATION,
                       limits.size() .. " tenants")
        -- The busy tenant was asked once; every other once.
        assert.equals(N + 1, asked)
    end)

    it("the meter's last counts: only tenants C still reports", function()
        local known, pushed, born = {}, 5, {}
        helper.core_double({
            ephd_ffi_now_ms = function() return 0ULL end,
            ephd_ffi_tenant_next = function(pos, name, out)
                local t = known[tonumber(pos[0]) + 1]
                if not t then return -3 end
                pos[0] = pos[0] + 1
                name.ptr, name.len = t, #t
                out.pushed, out.delivered = pushed, 0
                out.born = born[t] or 1
                return 0
            end,
        })
        local host = require("ephd.host")
        local files = { init = 'return { name = "m", version = 1, hooks = { '
            .. 'meter = function() return {} end } }' }
        assert(host.init("/m", files, DEFAULT, testing.read(DEFAULT)))
        for i = 1, N do known[i] = tenant(i) end
        host.meter()
        assert.equals(N, require("ephd.metering").metered())
        -- C forgot all but two (the engine forgets tenants with nothing).
        known = { tenant(1), tenant(2) }
        host.meter()
        assert.equals(2, require("ephd.metering").metered())
        known = { tenant(3) }
        host.meter()
        assert.equals(1, require("ephd.metering").metered())
        -- One C forgot and met again (a new born) counts from zero.
        local seen
        require("ephd.hooks").active.hooks.meter = function(d) seen = d end
        pushed, born[tenant(3)] = 2, 2
        host.meter()
        assert.equals(2, seen[1].pushed)
    end)

    it("a request refused before the rate rung keeps nothing", function()
        local respond, answers = helper.responder()
        helper.core_double({
            ephd_ffi_respond = respond,
            ephd_ffi_now_ms = function() return 0ULL end,
        }, { tenancy_header = 1, require_grant = 1 })
        local host = require("ephd.host")
        assert(host.init(DEFAULT, testing.read(DEFAULT), DEFAULT,
                         testing.read(DEFAULT)))
        local limits = require("ephd.limits")
        local rate = require("ephd.rate")
        local body = '{"queue":"q","messages":[{"payload":1}]}'
        for i = 1, 1000 do
            local req = helper.request({ method = "POST",
                path = "/api/v1/ephemeral/push", body = body,
                tenant = tenant(i) })
            helper.slot[0] = req
            host.dispatch()
            assert.equals("feature_gated",
                          cjson.decode(answers[#answers].body).code)
        end
        assert.equals(0, limits.size())
        assert.equals(0, rate.size())
    end)
end)
