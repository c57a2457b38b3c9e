-- Per-tenant token buckets, one token per message pushed (or whatever the
-- policy's cost hook says a push costs). The live policy's buckets are the
-- module's own (rate.take and friends), outside the policy, so a reload
-- keeps them; a new rate applies from the next take. A shadow policy
-- (ephd.verdict) has a set of its own, rate.new(), with the same
-- arithmetic: what it takes never touches the live tenant's tokens.
--
-- Tenant ids are the client's to choose, so buckets are forgotten: a
-- bucket that has refilled to its burst says nothing a new one would not,
-- and is dropped by a sweep that runs when the count of buckets doubles
-- since the last sweep (amortized O(1) per new bucket). Buckets live as
-- long as their tenant pushes faster than its rate, no longer.
local ceil = math.ceil

local _M = {}

-- Fewer buckets than this are never swept.
_M.SWEEP_FLOOR = 4096

local Buckets = {}
Buckets.__index = Buckets

function _M.new()
    return setmetatable({ buckets = {}, count = 0,
                          sweep_at = _M.SWEEP_FLOOR }, Buckets)
end

-- Drops every bucket full by now_ms; the next sweep waits for as many
-- new buckets as are left.
local function sweep(self, now_ms)
    local buckets, count = self.buckets, self.count
    for tenant, b in pairs(buckets) do
        if b.full_at <= now_ms then
            buckets[tenant] = nil
            count = count - 1
        end
    end
    self.count = count
    local at = count * 2
    self.sweep_at = at < _M.SWEEP_FLOOR and _M.SWEEP_FLOOR or at
end

-- Takes `cost` tokens at `now_ms`. Returns true, or false and an honest
-- Retry-After in seconds (at least 1). A cost of nothing always passes (an
-- empty push meters nothing). A cost above the burst never fits: it is
-- refused with the wait for a full bucket and a third result, true, so the
-- caller can say to split it; letting it through into debt would let a
-- tenant granted 5 a second push 10,000 at once.
function Buckets:take(tenant, cost, rate, burst, now_ms)
    if rate == 0 or cost == 0 then return true end
    local b = self.buckets[tenant]
    if not b then
        if self.count >= self.sweep_at then sweep(self, now_ms) end
        b = { tokens = burst, at = now_ms, full_at = now_ms }
        self.buckets[tenant] = b
        self.count = self.count + 1
    end
    local tokens = b.tokens + (now_ms - b.at) * rate / 1000
    if tokens > burst then tokens = burst end
    b.at = now_ms
    local need = cost < burst and cost or burst
    local ok = cost <= burst and tokens >= need
    if ok then tokens = tokens - cost end
    b.tokens = tokens
    -- When it will hold its burst again, at this rate.
    b.full_at = now_ms + (burst - tokens) * 1000 / rate
    if ok then return true end
    local wait = ceil((need - tokens) / rate)
    return false, wait < 1 and 1 or wait, cost > burst
end

-- Gives back what a push took when a later rung refused it (full_at stays
-- where it was: later than need be, so the bucket is kept a little long).
function Buckets:refund(tenant, cost)
    local b = self.buckets[tenant]
    if b then b.tokens = b.tokens + cost end
end

-- Buckets held (for specs and the curious).
function Buckets:size()
    return self.count
end

-- The live policy's buckets, and the module's functions over them.
local live = _M.new()
_M.live = live

function _M.take(tenant, cost, rate, burst, now_ms)
    return live:take(tenant, cost, rate, burst, now_ms)
end

function _M.refund(tenant, cost)
    return live:refund(tenant, cost)
end

function _M.size()
    return live:size()
end

function _M.reset()
    live.buckets, live.count, live.sweep_at = {}, 0, _M.SWEEP_FLOOR
end

return _M
