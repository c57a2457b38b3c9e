-- Per-tenant token buckets, one token per message pushed (or whatever the
-- policy's cost hook says a push costs). Buckets live here, outside the
-- policy, so a reload keeps them; a new rate applies from the next take.
local ceil = math.ceil

local _M = {}

local buckets = {}

-- Takes `cost` tokens at `now_ms`. Returns true, or false and an honest
-- Retry-After in seconds (at least 1). A cost above the burst is let
-- through from a full bucket, leaving a debt, so it is never refused for
-- ever: 429 means that waiting works.
function _M.take(tenant, cost, rate, burst, now_ms)
    if rate == 0 then return true end
    local b = buckets[tenant]
    if not b then
        b = { tokens = burst, at = now_ms }
        buckets[tenant] = b
    end
    local tokens = b.tokens + (now_ms - b.at) * rate / 1000
    if tokens > burst then tokens = burst end
    b.at = now_ms
    local need = cost < burst and cost or burst
    if tokens >= need then
        b.tokens = tokens - cost
        return true
    end
    b.tokens = tokens
    local wait = ceil((need - tokens) / rate)
    return false, wait < 1 and 1 or wait
end

-- Gives back what a push took when a later rung refused it.
function _M.refund(tenant, cost)
    local b = buckets[tenant]
    if b then b.tokens = b.tokens + cost end
end

function _M.reset()
    buckets = {}
end

return _M
