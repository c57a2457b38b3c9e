-- Tenants' counters as Lua tables: what the metering route exports, what
-- the meter hook is handed, and what policy code reads with
-- ephd.counters(tenant). A push meters as messages, a pop as deliveries.
local ffi = require("ffi")
local core = require("ephd.core")

local C = core.C

local _M = {}

local pos = ffi.new("size_t[1]")
local name = ffi.new("ephd_slice_t")
local stats = ffi.new("ephd_tenant_stats_t")

local function table_of(s)
    return {
        pushed = tonumber(s.pushed),
        delivered = tonumber(s.delivered),
        parked = tonumber(s.parked),
        bytes = tonumber(s.bytes),
        queues = tonumber(s.queues),
        born = tonumber(s.born),
        drops = { bounds = tonumber(s.dropped_bounds),
                  ttl = tonumber(s.dropped_ttl),
                  retry = tonumber(s.dropped_retry) },
    }
end

-- One tenant's counters, or nil for a tenant never seen.
function _M.of(tenant)
    if type(tenant) ~= "string"
            or C.ephd_tenant_stats(tenant, #tenant, stats) ~= 0 then
        return nil
    end
    return table_of(stats)
end

-- Every tenant's counters, sorted by tenant.
function _M.all()
    local out = {}
    pos[0] = 0
    while C.ephd_tenant_next(pos, name, stats) ~= 0 do
        local t = table_of(stats)
        t.tenant = ffi.string(name.ptr, name.len)
        out[#out + 1] = t
    end
    table.sort(out, function(a, b) return a.tenant < b.tenant end)
    return out
end

return _M
