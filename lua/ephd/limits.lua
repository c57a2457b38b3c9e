-- A tenant's limits, as the policy's limits hook decides from its grant and
-- the broker's knobs. Asked once per tenant and kept, in the form C takes,
-- until a reload or a grants refresh forgets them all.
local ffi = require("ffi")
local core = require("ephd.core")
local grants = require("ephd.grants")
local hooks = require("ephd.hooks")

local config = core.config

local _M = {}

local cache = {}

local function count(v)
    return v == nil or (type(v) == "number" and v >= 0 and v == math.floor(v))
end

function _M.defaults()
    return {
        rate = tonumber(config.rate),
        burst = tonumber(config.burst),
        max_parked = tonumber(config.max_parked),
    }
end

-- Returns {rate, burst, c = ephd_tenant_limits_t} or nil when the hook
-- failed (the request is then a 503).
function _M.get(tenant)
    local l = cache[tenant]
    if l then return l end
    local ok, t = hooks.call("limits", tenant, grants.get(tenant),
                             _M.defaults())
    if not ok then return nil end
    if type(t) ~= "table" or not (count(t.rate) and count(t.burst)
            and count(t.max_bytes) and count(t.max_queues)
            and count(t.max_parked)) then
        hooks.reject("limits", "limits must return a table of "
                     .. "non-negative integers")
        return nil
    end
    l = {
        rate = t.rate or 0,
        burst = t.burst or tonumber(config.burst),
        c = ffi.new("ephd_tenant_limits_t", {
            max_bytes = t.max_bytes or 0,
            max_queues = t.max_queues or 0,
            max_parked = t.max_parked or 0,
        }),
    }
    cache[tenant] = l
    return l
end

function _M.forget()
    cache = {}
end

return _M
