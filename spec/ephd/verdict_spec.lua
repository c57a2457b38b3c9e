local helper = require("helper")
local policy = require("ephd.policy")
local testing = require("ephd.testing")

local DEFAULT = helper.root .. "/policies/default"
local PLAN_TIERS = helper.root .. "/examples/policies/plan-tiers"

local FREE = "22222222-2222-2222-2222-222222222222"
local PRO = "11111111-1111-1111-1111-111111111111"

-- A policy from its init.lua text over the default.
local function load(init, extra)
    local files = { init = init }
    for k, v in pairs(extra or {}) do files[k] = v end
    return assert(policy.load("/p", files, DEFAULT, testing.read(DEFAULT),
                              {}))
end

local function env(over)
    local e = {
        grant = function() return nil end,
        require_grant = false,
        defaults = function() return { rate = 5000, burst = 10000,
                                        max_parked = 100, max_queues = 100 }
        end,
        tenancy_header = true,
    }
    for k, v in pairs(over or {}) do e[k] = v end
    return e
end

local function push(tenant, messages, extra)
    local r = { route = "push", method = "POST",
                path = "/api/v1/ephemeral/push", tenant = tenant,
                messages = messages, bytes = messages * 10, queue = "q" }
    for k, v in pairs(extra or {}) do r[k] = v end
    return r
end

describe("ephd.verdict", function()
    local verdict
    before_each(function()
        verdict = require("ephd.verdict")
    end)

    it("loads in a plain luajit: no ephd.core, no ffi declarations",
       function()
        local saved = {}
        for name, m in pairs(package.loaded) do
            if name:find("^ephd%.") then
                saved[name] = m
                package.loaded[name] = nil
            end
        end
        package.preload["ephd.core"] = function()
            error("ephd.verdict required ephd.core")
        end
        local ok, err = pcall(require, "ephd.verdict")
        package.preload["ephd.core"] = nil
        for name in pairs(package.loaded) do
            if name:find("^ephd%.") then package.loaded[name] = nil end
        end
        for name, m in pairs(saved) do package.loaded[name] = m end
        assert.is_true(ok, err)
    end)

    it("passes what plan-tiers passes and refuses a free tenant's burst",
       function()
        local files = testing.read(PLAN_TIERS)
        local p = assert(policy.load(PLAN_TIERS, files, DEFAULT,
                                     testing.read(DEFAULT), {}))
        local judge = verdict.new(p, env())
        assert.is_nil(judge:decide(push(PRO, 5000), 0))
        -- free: rate 100, burst 200.
        assert.is_nil(judge:decide(push(FREE, 200), 0))
        local code, rung, message = judge:decide(push(FREE, 1), 0)
        assert.equals("rate_limited", code)
        assert.equals("rate", rung)
        assert.matches("over its rate of 100", message)
        -- Above the burst: from a full bucket it passes, into debt.
        assert.is_nil(judge:decide(push(FREE, 201), 60000))
        code, rung, message = judge:decide(push(FREE, 201), 61000)
        assert.equals("rate_limited", code)
        assert.matches("costs 201, more than its burst of 200", message)
        -- A second later, a second's worth less the debt.
        assert.is_nil(judge:decide(push(FREE, 99), 61000))
    end)

    it("keeps buckets and limits of its own, never the live ones", function()
        local rate = require("ephd.rate")
        rate.reset()
        local p = load('return { name = "strict", version = 2, hooks = {'
                       .. ' limits = function() return { rate = 1, burst = 1 }'
                       .. ' end } }')
        local judge = verdict.new(p, env())
        assert.is_nil(judge:decide(push(FREE, 1), 0))
        assert.equals("rate_limited", (judge:decide(push(FREE, 1), 0)))
        assert.equals(0, rate.size())
        assert.equals(1, judge.rate.size())
        -- Two judges of one policy share nothing either.
        assert.is_nil(verdict.new(p, env()):decide(push(FREE, 1), 0))
    end)

    it("gives back what undo is told was refused later", function()
        local p = load('return { name = "s", version = 1, hooks = {'
                       .. ' limits = function() return { rate = 1, burst = 1 }'
                       .. ' end } }')
        local judge = verdict.new(p, env())
        assert.is_nil(judge:decide(push(FREE, 1), 0))
        judge:undo()
        assert.is_nil(judge:decide(push(FREE, 1), 0))
    end)

    it("asks the limits hook once per tenant until forget", function()
        local asked = 0
        local p = load('return { name = "s", version = 1, hooks = {'
                       .. ' limits = function() return {} end } }')
        p.hooks.limits = function() asked = asked + 1 return {} end
        local judge = verdict.new(p, env())
        for _ = 1, 3 do judge:decide(push(FREE, 1), 0) end
        assert.equals(1, asked)
        judge:forget()
        judge:decide(push(FREE, 1), 0)
        assert.equals(2, asked)
    end)

    it("calls the policy's cost hook, or takes the count for the default's",
       function()
        local seen
        local p = load('return { name = "c", version = 1, hooks = {'
                       .. ' limits = function() return { rate = 10, '
                       .. 'burst = 10 } end,'
                       .. ' cost = function(push) return push.bytes end } }')
        local cost = p.hooks.cost
        p.hooks.cost = function(pu) seen = pu return cost(pu) end
        local judge = verdict.new(p, env())
        -- 1 message of 10 bytes costs 10: the whole burst.
        assert.is_nil(judge:decide(push(FREE, 1), 0))
        assert.same({ tenant = FREE, queue = "q", messages = 1, bytes = 10 },
                    seen)
        assert.equals("rate_limited", (judge:decide(push(FREE, 1), 0)))
        -- No messages (a pop, or a push refused before its shape was
        -- read): no cost asked.
        seen = nil
        assert.is_nil(judge:decide({ route = "pop", method = "GET",
                                     path = "/api/v1/ephemeral/pop",
                                     tenant = FREE }, 0))
        assert.is_nil(seen)
    end)

    it("follows the kill switch and the paused hook, family routes only",
       function()
        local p = load('return { name = "p", version = 1, hooks = {'
                       .. ' paused = function(r) if r.route == "push" then '
                       .. 'return 60, "maintenance" end end } }')
        local judge = verdict.new(p, env())
        assert.same({ "ephemeral_disabled", "paused", "maintenance" },
                    { judge:decide(push(FREE, 1), 0) })
        assert.is_nil(judge:decide({ route = "pop", method = "GET",
                                     path = "/api/v1/ephemeral/pop",
                                     tenant = FREE }, 0))
        judge = verdict.new(load('return { name = "n", version = 1, '
                                 .. 'hooks = {} }'),
                            env({ paused = function() return "switched" end,
                                  tenancy_header = false }))
        assert.same({ "ephemeral_disabled", "paused", "switched" },
                    { judge:decide(push(FREE, 1), 0) })
        -- A system route is never paused: the operator unpauses there.
        assert.is_nil(judge:decide({ route = "system_status", method = "GET",
                                     path = "/api/v1/system/ephemeral",
                                     tenant = FREE }, 0))
    end)

    describe("identity", function()
        local p
        before_each(function()
            p = load('return { name = "a", version = 1, hooks = {'
                     .. ' authenticate = function(r)'
                     .. '  if r.authorization == "Bearer admin" then'
                     .. '   return { tenant = r.tenant, level = "admin" } end'
                     .. '  if r.authorization == "Bearer ro" then'
                     .. '   return { tenant = r.tenant, level = "read-only" } end'
                     .. '  if r.authorization == nil then'
                     .. '   return "unauthorized", "no token" end'
                     .. ' end } }')
        end)

        it("refuses as the hook says, at the authenticate rung", function()
            local judge = verdict.new(p, env())
            assert.same({ "unauthorized", "authenticate", "no token" },
                        { judge:decide(push(FREE, 1), 0) })
        end)

        it("checks the identity's level against the route's", function()
            local judge = verdict.new(p, env())
            local code, rung, message = judge:decide(
                push(FREE, 1, { authorization = "Bearer ro" }), 0)
            assert.equals("forbidden", code)
            assert.equals("authenticate", rung)
            assert.matches("push needs write%-only access", message)
            local status = { route = "system_status", method = "GET",
                             path = "/api/v1/system/ephemeral", tenant = FREE }
            status.authorization = "Bearer admin"
            assert.is_nil(judge:decide(status, 0))
            -- Unvouched under tenancy headers: read-write, never admin.
            status.authorization = "Bearer other"
            assert.equals("forbidden", (judge:decide(status, 0)))
            -- Without them, whoever reaches the port is its operator.
            judge = verdict.new(p, env({ tenancy_header = false }))
            assert.is_nil(judge:decide(status, 0))
        end)

        it("takes a logged identity as given when there is no credential",
           function()
            local judge = verdict.new(p, env())
            local r = push(FREE, 1, { identity = { tenant = FREE,
                                                   level = "read-only" } })
            local code, rung = judge:decide(r, 0)
            assert.same({ "forbidden", "authenticate" }, { code, rung })
            r.identity.level = "read-write"
            assert.is_nil(judge:decide(r, 0))
        end)

        it("refuses a request with no usable tenant", function()
            local judge = verdict.new(p, env())
            assert.equals("unauthorized", (judge:decide(push(nil, 1), 0)))
        end)
    end)

    it("gates by the grant rows it is given", function()
        local p = load('return { name = "g", version = 1, hooks = {} }')
        local rows = { [PRO] = { enabled = true }, [FREE] = { enabled = false } }
        local judge = verdict.new(p, env({
            grant = function(t) return rows[t] end, require_grant = true }))
        assert.is_nil(judge:decide(push(PRO, 1), 0))
        assert.same({ "feature_gated", "grant",
                      "the tenant is not granted ephemeral queues" },
                    { judge:decide(push(FREE, 1), 0) })
        assert.equals("feature_gated", (judge:decide(push(
            "33333333-3333-3333-3333-333333333333", 1), 0)))
    end)

    it("estimates the tenant's bytes against the candidate's max_bytes",
       function()
        local p = load('return { name = "b", version = 1, hooks = {'
                       .. ' limits = function() return { max_bytes = 100 }'
                       .. ' end } }')
        local held = 50
        local judge = verdict.new(p, env({
            counters = function() return { bytes = held } end }))
        assert.is_nil(judge:decide(push(FREE, 5), 0)) -- 50 + 50
        held = 51
        local code, rung = judge:decide(push(FREE, 5), 0)
        assert.equals("ephemeral_quota_exceeded", code)
        assert.equals("budget", rung)
    end)

    describe("a hook that fails", function()
        local function failing(hook_source, hook)
            local p = load('return { name = "f", version = 1, hooks = { '
                           .. hook .. ' = ' .. hook_source .. ' } }')
            local judge = verdict.new(p, env())
            local ok, err = pcall(judge.decide, judge, push(FREE, 1), 0)
            assert.is_false(ok)
            return verdict.failure(err)
        end

        it("raises, naming the hook, when it raised", function()
            local hook, why = failing('function() error("boom") end',
                                      "authenticate")
            assert.equals("authenticate", hook)
            assert.matches("boom", why)
        end)

        it("raises with the contract's message for garbage", function()
            local hook, why = failing('function() return { rate = -1 } end',
                                      "limits")
            assert.equals("limits", hook)
            assert.matches("whole number", why)
            hook, why = failing('function() return "lots" end', "cost")
            assert.equals("cost", hook)
            assert.matches("finite non%-negative", why)
            hook = failing('function() return 0 end', "paused")
            assert.equals("paused", hook)
        end)

        it("raises when the caller's budget stopped it", function()
            local p = load('return { name = "f", version = 1, hooks = {} }')
            local judge = verdict.new(p, env({ call = function(_, hook)
                if hook == "limits" then return false, "over budget" end
                return true
            end }))
            local ok, err = pcall(judge.decide, judge, push(FREE, 1), 0)
            assert.is_false(ok)
            assert.same({ "limits", "over budget" },
                        { verdict.failure(err) })
            assert.equals("limits: over budget", tostring(err))
        end)
    end)
end)
