-- A tenant's limits, as a policy's limits hook decides from its grant and
-- the broker's knobs, kept until a reload or a grants refresh forgets them
-- all. Tenant ids are the client's to choose, so a cache is bounded: two
-- generations of at most GENERATION tenants each. A tenant asked about in
-- the young generation stays there; one found in the old is moved up; when
-- the young fills, the old is dropped whole and the young becomes it. A
-- tenant idle for a generation is asked again, one hook call, which is all
-- forgetting costs.
--
-- The live policy's cache is the module's own (limits.get and friends),
-- its limits also in the form C takes (`c`, an ephd_tenant_limits_t); a
-- shadow policy (ephd.verdict) has one of its own, limits.new(decide),
-- which never reaches C. This module loads without a broker: the live
-- cache requires the broker's modules when it first asks the policy.
local ffi = require("ffi")
local contract = require("ephd.contract")

local _M = {}

_M.GENERATION = 10000

-- A limits result the contract took, with the broker's rule for what it
-- leaves out: a rate bounds its own burst unless the policy says
-- otherwise (Queen's rule: rate = burst), 0 is no limit.
function _M.settle(t, default_burst)
    local rate = t.rate or 0
    return {
        rate = rate,
        burst = t.burst or (rate > 0 and rate or default_burst),
        max_bytes = t.max_bytes or 0,
        max_queues = t.max_queues or 0,
        max_parked = t.max_parked or 0,
    }
end

-- A cache of limits: functions over state of their own (closures, so the
-- live cache's get costs what a module's function does). decide(tenant)
-- returns a tenant's limits, or nil when the policy failed (nothing is
-- then kept, and the next request asks again).
function _M.new(decide)
    local young, old, n = {}, {}, 0
    local cache = {}

    function cache.get(tenant)
        local l = young[tenant]
        if l then return l end
        l = old[tenant]
        if l then
            old[tenant] = nil
        else
            l = decide(tenant)
            if not l then return nil end
        end
        if n >= _M.GENERATION then
            old, young, n = young, {}, 0
        end
        young[tenant] = l
        n = n + 1
        return l
    end

    -- Tenants whose limits are kept (for specs and the curious).
    function cache.size()
        local total = n
        for _ in pairs(old) do total = total + 1 end
        return total
    end

    function cache.forget()
        young, old, n = {}, {}, 0
    end

    return cache
end

-- The live policy's --------------------------------------------------------

local core, grants, hooks

local function broker()
    if not core then
        core = require("ephd.core")
        grants = require("ephd.grants")
        hooks = require("ephd.hooks")
    end
end

function _M.defaults()
    broker()
    local config = core.config
    return contract.defaults(tonumber(config.rate), tonumber(config.burst),
                             tonumber(config.max_parked),
                             tonumber(config.tenant_max_queues))
end

-- Asks the policy in force; returns the limits or nil when the hook failed.
local function decide(tenant)
    broker()
    local ok, t = hooks.call("limits", tenant, grants.get(tenant),
                             _M.defaults())
    if not ok then return nil end
    local bad = contract.check.limits(t)
    if bad then
        hooks.reject("limits", bad)
        return nil
    end
    local l = _M.settle(t, tonumber(core.config.burst))
    l.c = ffi.new("ephd_tenant_limits_t", {
        max_bytes = l.max_bytes,
        max_queues = l.max_queues,
        max_parked = l.max_parked,
    })
    return l
end

local live = _M.new(decide)
_M.live = live

-- Returns {rate, burst, max_bytes, max_queues, max_parked, c =
-- ephd_tenant_limits_t} or nil when the hook failed (the request is then
-- a 503, and nothing is kept); size and forget as a cache's.
_M.get, _M.size, _M.forget = live.get, live.size, live.forget

return _M
