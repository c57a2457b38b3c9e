local helper = require("helper")
local testing = require("ephd.testing")

local DEFAULT = helper.root .. "/policies/default"

-- A shadow of a policy from its init.lua text, over the default.
local function start(init)
    local policy = require("ephd.policy")
    local p = assert(policy.load("/candidate", { init = init }, DEFAULT,
                                 testing.read(DEFAULT), {}))
    return require("ephd.shadow").start(p, "/candidate")
end

-- A push the live ladder decided: passed, or refused with code at rung.
local function push(tenant, code, rung)
    local ctx = helper.ctx({ method = "POST",
                             path = "/api/v1/ephemeral/push" }, tenant)
    ctx.route = helper.route("push")
    ctx.messages, ctx.bytes, ctx.queue = 1, 1, "q"
    ctx.request, ctx.forwarded = false, false
    ctx.code, ctx.rung = code or false, rung or false
    return ctx
end

local REFUSE_ALL = 'return { name = "no", version = 1, hooks = { '
    .. 'authenticate = function() return "forbidden", "no" end } }'
local PASS_ALL = 'return { name = "yes", version = 1, hooks = {} }'

describe("ephd.shadow", function()
    local shadow, logged
    before_each(function()
        logged = {}
        helper.core_double({
            ephd_ffi_now_ms = function() return 0ULL end,
            ephd_ffi_wall_time = function() return 1700000000.5 end,
            ephd_ffi_tenant_stats = function() return -3 end,
            ephd_ffi_log_fields = function(_, event, fields)
                logged[#logged + 1] = require("ffi").string(event) .. " "
                                      .. require("ffi").string(fields)
            end,
        })
        shadow = require("ephd.shadow")
    end)

    it("counts (live, shadow) pairs, agreements included", function()
        local s = start(PASS_ALL)
        shadow.observe(push("t1"), s)
        shadow.observe(push("t1", "rate_limited", "rate"), s)
        -- Refused after the policy's rungs: the candidate's is the same.
        shadow.observe(push("t1", "queue_full", "commit"), s)
        local r = shadow.report()
        assert.equals(3, r.decisions)
        assert.equals(1, r.disagreements)
        assert.same({ live = "rate_limited", shadow = "pass", count = 1 },
                    r.pairs[1])
        assert.equals(3, #r.pairs)
        assert.same({ at = 1700000000500, route = "push", tenant = "t1",
                      live = "rate_limited", shadow = "pass",
                      rung = "live:rate" }, r.samples[1])
        assert.same(r.pairs, shadow.decisions())
    end)

    it("keeps a fixed table of tenants whatever the ids, the busiest kept",
       function()
        local s = start(REFUSE_ALL)
        for i = 1, 10000 do
            shadow.observe(push(("tenant-%d"):format(i)), s)
            if i % 10 == 0 then shadow.observe(push("heavy"), s) end
        end
        assert.is_true(s.tenants.n <= shadow.TENANTS)
        local n = 0
        for _ in pairs(s.tenants.slot) do n = n + 1 end
        assert.equals(s.tenants.n, n)
        local r = shadow.report()
        assert.equals(11000, r.disagreements)
        assert.equals(shadow.TOP, #r.tenants)
        assert.equals("heavy", r.tenants[1].tenant)
        assert.is_true(r.tenants[1].disagreements >= 1000)
        -- The ring: the last SAMPLES, newest first.
        assert.equals(shadow.SAMPLES, #r.samples)
        assert.equals("heavy", r.samples[1].tenant)
        assert.equals("tenant-10000", r.samples[2].tenant)
        assert.equals("tenant-9999", r.samples[3].tenant)
    end)

    it("disables itself once, on a hook that raises", function()
        local s = start('return { name = "b", version = 1, hooks = { '
                        .. 'cost = function() error("broke") end } }')
        shadow.observe(push("t1"), s)
        shadow.observe(push("t1"), s)
        assert.equals("disabled", s.state)
        assert.equals("cost", s.disabled.hook)
        assert.matches("broke", s.disabled.error)
        assert.equals(0, s.decisions)
        assert.equals(1, shadow.disabled_total)
        assert.equals(1, #logged)
        assert.matches("^policy_shadow_disabled ", logged[1])
        assert.matches("hook=cost", logged[1])
    end)

    it("keeps an excerpt of a huge error, in its report and its log",
       function()
        local s = start('return { name = "b", version = 1, hooks = { '
                        .. 'cost = function() error(("x"):rep(1e6), 0) end } }')
        shadow.observe(push("t1"), s)
        assert.equals("disabled", s.state)
        assert.truthy(#s.disabled.error < 600, #s.disabled.error)
        assert.truthy(s.disabled.error:find("(1000000 bytes)", 1, true))
        assert.truthy(#logged[1] < 800, #logged[1])
    end)

    it("asks no cost, rate or bytes of a push refused for its shape",
       function()
        -- A cost hook that reads the queue's name (a malformed push may
        -- have none) and a burst of one: the ladder checks the shape
        -- before the rate, so the candidate answers the live 400 and its
        -- cost hook, as the live one, is never asked.
        local s = start('return { name = "c", version = 1, hooks = { '
            .. 'limits = function() return { rate = 1, burst = 1 } end, '
            .. 'cost = function(p) return #p.queue end } }')
        local ctx = push("t1", "ephemeral_bad_request", "shape")
        ctx.messages, ctx.queue = 5, false
        shadow.observe(ctx, s)
        assert.equals("running", s.state)
        assert.equals(1, s.decisions)
        assert.equals(0, s.disagreements)
    end)

    it("answers the queue's bounds the engine refused before its own "
       .. "estimate of the tenant's bytes", function()
        -- The tenant holds 100 bytes and the candidate allows 10: its
        -- bytes rung would refuse, but queue_full is the outer rung.
        local held = helper.core_double
        held({
            ephd_ffi_now_ms = function() return 0ULL end,
            ephd_ffi_wall_time = function() return 1700000000.5 end,
            ephd_ffi_tenant_stats = function(_, _, stats)
                stats.bytes = 100
                return 0
            end,
        })
        shadow = require("ephd.shadow")
        local s = start('return { name = "b", version = 1, hooks = { '
            .. 'limits = function() return { max_bytes = 10 } end } }')
        shadow.observe(push("t1", "queue_full", "commit"), s)
        local r = shadow.report()
        assert.equals(0, r.disagreements)
        assert.same({ live = "queue_full", shadow = "queue_full",
                      count = 1 }, r.pairs[1])
        -- Passed by the live engine, the estimate stands.
        shadow.observe(push("t1"), s)
        assert.same({ live = "pass", shadow = "ephemeral_quota_exceeded",
                      count = 1 }, shadow.report().pairs[1])
    end)

    it("gives the candidate's limits hook a copy of the live grant row",
       function()
        local contract = require("ephd.contract")
        local grants = require("ephd.grants")
        -- Without tenancy headers, the default tenant's.
        local t = "00000000-0000-0000-0000-000000000001"
        grants.replace({ [t] = contract.grant(true, nil, nil, 100) })
        local s = start('return { name = "w", version = 1, hooks = { '
            .. 'limits = function(_, grant) grant.enabled = false; '
            .. 'grant.max_msgs_per_sec = 1; return {} end } }')
        shadow.observe(push("t1"), s)
        assert.equals("running", s.state)
        assert.equals(1, s.decisions)
        assert.same(contract.grant(true, nil, nil, 100), grants.get(t))
    end)

    it("judges no request relayed by a member of the cell", function()
        local s = start(REFUSE_ALL)
        local ctx = push("t1")
        ctx.forwarded = true
        shadow.observe(ctx, s)
        assert.equals(0, s.decisions)
    end)

    it("answers null without a shadow", function()
        shadow.stop()
        assert.equals('{"shadow":null}', shadow.body())
        assert.same({}, shadow.decisions())
    end)
end)
