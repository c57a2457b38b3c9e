-- A policy's decision on one request, made with state of its own: the
-- rungs of ephd.rungs, the live ladder's own, run for a candidate policy
-- against real traffic (the broker's shadow, ephd.shadow) or logged
-- traffic (ephd policy replay) over a state that never touches the live
-- policy's rate buckets, limits cache or anything else. Pure Lua: it
-- loads in a plain luajit, with no broker.
--
-- What it leaves to the caller: the checks that are the broker's and not
-- the policy's (a browser's forgery, the request's shape, the cell's
-- forward mark, the engine's budgets at commit) are the same for any
-- policy; ephd.shadow answers them as the live ladder did. In place of
-- the engine's commit it estimates the tenant's bytes, from its footprint.
local context = require("ephd.context")
local contract = require("ephd.contract")
local grants = require("ephd.grants")
local limits = require("ephd.limits")
local rate = require("ephd.rate")
local routes = require("ephd.routes")
local rungs = require("ephd.rungs")

local getmetatable, pcall, setmetatable, tostring = getmetatable, pcall,
                                                    setmetatable, tostring

local _M = {}

-- Route name -> its row (name, level, class, method).
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

-- What the rungs read of a request asked about (see Judge:decide).
local function tenant_of(r)
    return r.tenant
end

local function seen(r)
    return r.method, r.path, r.authorization
end

local QUOTA = rungs.RUNG.ephemeral_quota_exceeded

-- The tenant's bytes the candidate allows, against what the tenant holds
-- now (its footprint, env.counters) plus the push's payload: an estimate,
-- since the engine charges a push more than its payload and other
-- requests land in between. Queue and parked-pop allowances need the
-- engine's view at commit and are not estimated. A push the engine took
-- under an allowance (request.fits, the shadow's) fits any as large: the
-- engine's rule is monotone in it, and its footprint may end a little
-- over (a slot array's growth is charged after the check, core/engine.c).
local function within_budget(env, ctx)
    local counters, l = env.counters, ctx.limits
    if not counters or not ctx.bytes or not l or l.max_bytes == 0 then
        return
    end
    local fits = ctx.req.fits
    if fits and fits ~= 0 and l.max_bytes >= fits then return end
    local held = counters(ctx.tenant)
    if held and held.bytes + ctx.bytes > l.max_bytes then
        return QUOTA.prefix .. QUOTA.which.TENANT_BYTES(l, ", estimated")
    end
end

local Judge = {}
Judge.__index = Judge

-- p: what ephd.policy.load returns; env: see docs (grant, require_grant,
-- defaults, tenancy_header, call, and optionally paused and counters).
function _M.new(p, env)
    -- Its request context (ephd.context), made once and refilled by
    -- decide, which stands for the dispatcher and the handler's parse; the
    -- rungs write their part as they do live. owed: the tokens a decision
    -- that passed took, until the next (undo gives them back).
    local self = setmetatable({ p = p, env = env, rate = rate.new(),
                                holder = { active = p }, ctx = context.new(),
                                owed = false }, Judge)
    local hook_call = env.call or plain_call
    -- Calls a hook p defines; raises when it raised or ran out of budget.
    -- A request that comes with its identity (replay's: credentials are
    -- never logged) is authenticated as the live broker established it.
    local function call(hook, ...)
        if hook == "authenticate" then
            local given = self.ctx.req.identity
            if given then return true, given end
        end
        local ok, a, b, c = hook_call(p, hook, ...)
        if not ok then fail(hook, a) end
        return true, a, b, c
    end
    self.limits = limits.new(function(tenant)
        -- The grant row is the broker's own, which the live policy reads
        -- too: the candidate gets a copy, so a hook that writes into its
        -- argument cannot change a live answer.
        local g = env.grant(tenant)
        if g then
            g = contract.grant(g.enabled, g.max_bytes, g.max_queues,
                               g.max_msgs_per_sec)
        end
        local _, t = call("limits", tenant, g, env.defaults())
        local bad = contract.check.limits(t)
        if bad then fail("limits", bad) end
        return limits.settle(t, env.defaults().burst)
    end)
    local unvouched = env.tenancy_header and "read-write" or "admin"
    local refund = self.rate.refund
    self.run = rungs.compile({
        holder = self.holder, call = call, reject = fail,
        switch = env.paused or function() end, retry_after_s = 1,
        tenant = tenant_of, unvouched = function() return unvouched end,
        seen = seen,
        gated = function(tenant, require_grant)
            return grants.gates(env.grant(tenant), require_grant)
        end,
        require_grant = env.require_grant,
        limits = self.limits.get, take = self.rate.take,
        clock = function() return self.now_ms end,
    }, function(ctx, code, message, _, rung)
        if ctx.taken then refund(ctx.tenant, ctx.taken) end
        return code, rung, message
    end, function(ctx)
        local message = within_budget(env, ctx)
        if message then
            refund(ctx.tenant, ctx.taken or 0)
            return "ephemeral_quota_exceeded", "budget", message
        end
        self.owed = ctx.taken
    end, p.hooks)
    return self
end

-- request: route (its name), method, path, authorization, tenant (the
-- tenant read: nil when the header is unusable), identity (optional: the
-- identity authenticate established live), the names it carries (queue,
-- partition, group: what admit sees), for a push messages and bytes, and
-- fits: the tenant's byte allowance
-- the engine took it under, if it did (0: none). nil when the policy would pass every
-- rung; else code, rung, message. Raises (a Failure) when one of the
-- policy's hooks raised, overran or returned what the contract refuses.
function Judge:decide(request, now_ms)
    local row = ROUTE[request.route]
    if not row then error("ephd.verdict: no route " .. tostring(request.route)) end
    self.now_ms, self.owed = now_ms, false
    local ctx = self.ctx
    ctx.req, ctx.route, ctx.family = request, row, row.class == "family"
    ctx.request, ctx.tenant, ctx.level, ctx.limits, ctx.taken = false, false,
                                                  false, false, false
    ctx.queue, ctx.partition = request.queue or false,
                               request.partition or false
    ctx.group, ctx.messages = request.group or false, request.messages or false
    ctx.bytes = request.bytes or false
    return self.run(ctx)
end

-- Gives back what the last decide took from the candidate's buckets: the
-- request it passed was refused after the policy's rungs (by its shape or
-- the engine), as the live ladder refunds.
function Judge:undo()
    if self.owed then
        self.rate.refund(self.ctx.tenant, self.owed)
        self.owed = false
    end
end

-- Drops its limits cache (as a grants refresh does for the live one).
function Judge:forget()
    self.limits.forget()
end

return _M
