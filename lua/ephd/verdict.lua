-- A policy's decision on one request, made with state of its own: the
-- rungs of ephd.ladder that are the policy's (the kill switch and the
-- paused hook, identity and access level, grant, limits, cost and rate,
-- and the tenant budget its limits imply where that can be told before
-- the engine), run for a candidate policy against real traffic (the
-- broker's shadow, ephd.shadow) or logged traffic (ephd policy replay),
-- without touching the live policy's rate buckets, limits cache or
-- anything else. Pure Lua over the modules the live ladder uses
-- (ephd.contract's builders and checks, ephd.access, ephd.grants' rule,
-- ephd.limits' cache, ephd.rate's buckets): it loads in a plain luajit,
-- with no broker.
--
-- What it leaves to the caller: the checks that are the broker's and not
-- the policy's (a browser's forgery, the request's shape, the engine's
-- budgets at commit) are the same for any policy; ephd.shadow answers
-- them as the live ladder did.
local access = require("ephd.access")
local contract = require("ephd.contract")
local grants = require("ephd.grants")
local limits = require("ephd.limits")
local rate = require("ephd.rate")
local routes = require("ephd.routes")

local getmetatable, pcall, setmetatable, tostring = getmetatable, pcall,
                                                    setmetatable, tostring

local _M = {}

-- Route name -> its row (level, class).
local ROUTE = {}
for _, r in ipairs(routes) do ROUTE[r.name] = r end

-- What a hook that failed raises: the hook's name and why, shown as
-- "hook: why".
local Failure = {
    __tostring = function(f) return f.hook .. ": " .. f.error end,
}

local function fail(hook, why)
    error(setmetatable({ hook = hook, error = tostring(why) }, Failure), 0)
end

-- The hook's name and why of an error decide raised (a hook's failure),
-- or nil, and the error as a string, for anything else.
function _M.failure(err)
    if getmetatable(err) == Failure then return err.hook, err.error end
    return nil, tostring(err)
end

local function plain_call(p, hook, ...)
    return pcall(p.hooks[hook], ...)
end

-- Calls a hook p defines; raises when it raised or ran out of budget.
local function call(self, hook, ...)
    local ok, a, b, c = self.call(self.p, hook, ...)
    if not ok then fail(hook, a) end
    return a, b, c
end

local Judge = {}
Judge.__index = Judge

-- p: what ephd.policy.load returns; env: see docs (grant, require_grant,
-- defaults, tenancy_header, call, and optionally paused and counters).
function _M.new(p, env)
    local self = setmetatable({ p = p, env = env, rate = rate.new(),
                                call = env.call or plain_call,
                                taken_tenant = nil, taken = nil }, Judge)
    self.limits = limits.new(function(tenant)
        -- The grant row is the broker's own, which the live policy reads
        -- too: the candidate gets a copy, so a hook that writes into its
        -- argument cannot change a live answer.
        local g = env.grant(tenant)
        if g then
            g = contract.grant(g.enabled, g.max_bytes, g.max_queues,
                               g.max_msgs_per_sec)
        end
        local t = call(self, "limits", tenant, g, env.defaults())
        local bad = contract.check.limits(t)
        if bad then fail("limits", bad) end
        local l = limits.settle(t, env.defaults().burst)
        -- Made once per tenant: a shadow refusing every request of a
        -- tenant over its rate would make it for each.
        l.over_rate = rate.over_rate(l.rate)
        return l
    end)
    return self
end

local function paused(self, request)
    local pause = self.env.paused
    local reason = pause and pause()
    if reason then
        return "ephemeral_disabled", "paused", reason
    end
    if not self.p.hooks.paused then return end
    local after, why = call(self, "paused", contract.request(
        request.route, request.method, request.path, request.authorization))
    local bad = contract.check.paused(after, why)
    if bad then fail("paused", bad) end
    if after ~= nil then
        return "ephemeral_disabled", "paused", why or "paused by policy"
    end
end

-- Returns the tenant and level, or nil, code, rung, message.
local function identity(self, request, row)
    local tenant = request.tenant
    if not tenant then
        return nil, "unauthorized", "authenticate",
               "x-queen-tenant must be a UUID"
    end
    -- ephd.ladder's unvouched level: a header is a claim anyone can make.
    local level = self.env.tenancy_header and "read-write" or "admin"
    local given = request.identity
    if request.authorization == nil and given then
        tenant, level = given.tenant, given.level
    elseif self.p.hooks.authenticate then
        local who, why = call(self, "authenticate", contract.request(
            request.route, request.method, request.path,
            request.authorization, tenant))
        local bad = contract.check.authenticate(who, why)
        if bad then fail("authenticate", bad) end
        if type(who) == "string" then
            return nil, who, "authenticate", why or "refused by policy"
        elseif who then
            tenant, level = who.tenant:lower(), who.level
        end
    end
    if not access.allows(level, row.level) then
        return nil, "forbidden", "access",
               row.name .. " needs " .. row.level
               .. " access, this credential has " .. level
    end
    return tenant, level
end

-- The candidate's rate: its limits, its cost, its own buckets.
local function within_rate(self, request, tenant, l, now_ms)
    local messages = request.messages
    if not messages then return end
    local cost = messages
    if not self.p.messages_cost then
        cost = call(self, "cost", contract.push(
            tenant, request.queue, request.partition, messages,
            request.bytes))
        local bad = contract.check.cost(cost)
        if bad then fail("cost", bad) end
    end
    if not self.rate.take(tenant, cost, l.rate, l.burst, now_ms) then
        return cost > l.burst and rate.over_rate(l.rate, cost, l.burst)
               or l.over_rate
    end
    self.taken_tenant, self.taken = tenant, cost
end

-- The tenant's bytes the candidate allows, against what the tenant holds
-- now (its footprint, env.counters) plus the push's payload: an estimate,
-- since the engine charges a push more than its payload and other
-- requests land in between. Queue and parked-pop allowances need the
-- engine's view at commit and are not estimated.
local function within_budget(self, request, tenant, l)
    local counters = self.env.counters
    if not counters or not request.bytes or l.max_bytes == 0 then return end
    local held = counters(tenant)
    if held and held.bytes + request.bytes > l.max_bytes then
        return "at an ephemeral allowance: the tenant's bytes (limit "
               .. l.max_bytes .. ", estimated)"
    end
end

-- nil when the policy would pass every rung; else code, rung, message.
-- Raises (a Failure) when one of the policy's hooks raised, overran or
-- returned what the contract refuses.
function Judge:decide(request, now_ms)
    self.taken_tenant, self.taken = nil, nil
    local row = ROUTE[request.route]
    if not row then error("ephd.verdict: no route " .. tostring(request.route)) end
    local family = row.class == "family"
    local code, rung, message
    if family then
        code, rung, message = paused(self, request)
        if code then return code, rung, message end
    end
    local tenant
    tenant, code, rung, message = identity(self, request, row)
    if not tenant then return code, rung, message end
    if not family then return end
    if grants.gates(self.env.grant(tenant), self.env.require_grant) then
        return "feature_gated", "grant",
               "the tenant is not granted ephemeral queues"
    end
    local l = self.limits.get(tenant)
    message = within_rate(self, request, tenant, l, now_ms)
    if message then return "rate_limited", "rate", message end
    message = within_budget(self, request, tenant, l)
    if message then
        self:undo()
        return "ephemeral_quota_exceeded", "budget", message
    end
end

-- Gives back what the last decide took from the candidate's buckets: the
-- request it passed was refused after the policy's rungs (by its shape or
-- the engine), as the live ladder refunds.
function Judge:undo()
    if self.taken then
        self.rate.refund(self.taken_tenant, self.taken)
        self.taken_tenant, self.taken = nil, nil
    end
end

-- Drops its limits cache (as a grants refresh does for the live one).
function Judge:forget()
    self.limits.forget()
end

return _M
