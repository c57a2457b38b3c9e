-- A tenant's limits, as the policy's limits hook decides from its grant and
-- the broker's knobs, kept in the form C takes until a reload or a grants
-- refresh forgets them all. Tenant ids are the client's to choose, so the
-- cache is bounded: two generations of at most GENERATION tenants each. A
-- tenant asked about in the young generation stays there; one found in
-- the old is moved up; when the young fills, the old is dropped whole and
-- the young becomes it. A tenant idle for a generation is asked again, one
-- hook call, which is all forgetting costs.
local ffi = require("ffi")
local contract = require("ephd.contract")
local core = require("ephd.core")
local grants = require("ephd.grants")
local hooks = require("ephd.hooks")

local config = core.config

local _M = {}

_M.GENERATION = 10000

local young, old, size = {}, {}, 0

function _M.defaults()
    return contract.defaults(tonumber(config.rate), tonumber(config.burst),
                             tonumber(config.max_parked),
                             tonumber(config.tenant_max_queues))
end

-- Asks the policy; returns the limits or nil when the hook failed.
local function decide(tenant)
    local ok, t = hooks.call("limits", tenant, grants.get(tenant),
                             _M.defaults())
    if not ok then return nil end
    local bad = contract.check.limits(t)
    if bad then
        hooks.reject("limits", bad)
        return nil
    end
    local rate = t.rate or 0
    return {
        rate = rate,
        -- A rate bounds its own burst unless the policy says otherwise
        -- (Queen's rule: rate = burst).
        burst = t.burst or (rate > 0 and rate or tonumber(config.burst)),
        c = ffi.new("ephd_tenant_limits_t", {
            max_bytes = t.max_bytes or 0,
            max_queues = t.max_queues or 0,
            max_parked = t.max_parked or 0,
        }),
    }
end

-- Returns {rate, burst, c = ephd_tenant_limits_t} or nil when the hook
-- failed (the request is then a 503, and nothing is kept).
function _M.get(tenant)
    local l = young[tenant]
    if l then return l end
    l = old[tenant]
    if l then
        old[tenant] = nil
    else
        l = decide(tenant)
        if not l then return nil end
    end
    if size >= _M.GENERATION then
        old, young, size = young, {}, 0
    end
    young[tenant] = l
    size = size + 1
    return l
end

-- Tenants whose limits are kept (for specs and the curious).
function _M.size()
    local n = size
    for _ in pairs(old) do n = n + 1 end
    return n
end

function _M.forget()
    young, old, size = {}, {}, 0
end

return _M
