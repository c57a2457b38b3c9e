-- Tenants' counters as Lua tables: what the metering route exports, what
-- the meter hook is handed at each tick, and what policy code reads with
-- ephd.counters(tenant). A push meters as messages, a pop as deliveries.
local ffi = require("ffi")
local contract = require("ephd.contract")
local core = require("ephd.core")
local hooks = require("ephd.hooks")
local log = require("ephd.log")

local C = core.C
local floor = math.floor

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
            or C.ephd_ffi_tenant_stats(tenant, #tenant, stats) ~= C.EPHD_OK then
        return nil
    end
    return table_of(stats)
end

-- One tenant's footprint in bytes, or nil for a tenant never seen: for a
-- caller on a request's path (a shadow's budget estimate), which must not
-- build the whole table.
function _M.bytes(tenant)
    if C.ephd_ffi_tenant_stats(tenant, #tenant, stats) ~= C.EPHD_OK then
        return nil
    end
    return tonumber(stats.bytes)
end

-- Calls fn(tenant, counters) for every tenant C knows, in no order.
function _M.each(fn)
    pos[0] = 0
    while C.ephd_ffi_tenant_next(pos, name, stats) == C.EPHD_OK do
        fn(ffi.string(name.ptr, name.len), table_of(stats))
    end
end

-- A min-heap on bytes, for top(): heap[1] is the smallest holder kept.
local function sift_up(h, i)
    while i > 1 do
        local parent = floor(i / 2)
        if h[parent].bytes <= h[i].bytes then return end
        h[parent], h[i] = h[i], h[parent]
        i = parent
    end
end

local function sift_down(h, i, n)
    while true do
        local least, l, r = i, 2 * i, 2 * i + 1
        if l <= n and h[l].bytes < h[least].bytes then least = l end
        if r <= n and h[r].bytes < h[least].bytes then least = r end
        if least == i then return end
        h[least], h[i] = h[i], h[least]
        i = least
    end
end

local function entry()
    local t = table_of(stats)
    t.tenant = ffi.string(name.ptr, name.len)
    return t
end

local function first(a, b)
    if a.bytes ~= b.bytes then return a.bytes > b.bytes end
    return a.tenant < b.tenant
end

-- The `limit` tenants holding the most bytes, most first (which of equal
-- holders make the cut is unspecified), and how many tenants there are.
-- One pass over C's tenants keeping a heap of `limit`: a table is made
-- only for a tenant that enters it, and nothing sorts every tenant.
function _M.top(limit)
    local heap, n, total = {}, 0, 0
    pos[0] = 0
    while C.ephd_ffi_tenant_next(pos, name, stats) == C.EPHD_OK do
        total = total + 1
        if n < limit then
            n = n + 1
            heap[n] = entry()
            sift_up(heap, n)
        elseif tonumber(stats.bytes) > heap[1].bytes then
            heap[1] = entry()
            sift_down(heap, 1, n)
        end
    end
    table.sort(heap, first)
    return heap, total
end

-- The metering tick (C's timer): each tenant's counts since the last tick
-- go to the policy's meter hook, and every record it returns is logged as
-- one logfmt line, for a billing pipeline that reads the log. `last` is
-- rebuilt from what C reports at each tick, so a tenant C forgot is
-- forgotten here too; one C forgot and met again (a new born) counts
-- from zero.
local last = {}
local ZERO = { pushed = 0, delivered = 0 }

function _M.tick()
    if not hooks.active.hooks.meter then
        last = {}
        return
    end
    local deltas, now = {}, {}
    _M.each(function(tenant, t)
        local before = last[tenant]
        if not before or before.born ~= t.born then
            before = ZERO
        end
        deltas[#deltas + 1] = contract.delta(
            tenant, t.pushed - before.pushed, t.delivered - before.delivered,
            t.parked, t.bytes, t.queues)
        now[tenant] = { pushed = t.pushed, delivered = t.delivered,
                        born = t.born }
    end)
    last = now
    local ok, records = hooks.call("meter", deltas)
    if not ok then return end
    local bad = contract.check.meter(records)
    if bad then return hooks.reject("meter", bad) end
    for _, r in ipairs(records or {}) do log.info("meter", r) end
end

-- Tenants whose last metered counts are kept (for specs).
function _M.metered()
    local n = 0
    for _ in pairs(last) do n = n + 1 end
    return n
end

return _M
