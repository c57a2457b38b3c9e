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

-- A set of buckets: functions over state of their own (closures, so the
-- live set's take costs what a module's function does).
function _M.new()
    local buckets, count, sweep_at = {}, 0, _M.SWEEP_FLOOR
    local set = {}

    -- Drops every bucket full by now_ms; the next sweep waits for as many
    -- new buckets as are left.
    local function sweep(now_ms)
        for tenant, b in pairs(buckets) do
            if b.full_at <= now_ms then
                buckets[tenant] = nil
                count = count - 1
            end
        end
        sweep_at = count * 2
        if sweep_at < _M.SWEEP_FLOOR then sweep_at = _M.SWEEP_FLOOR end
    end

    -- Takes `cost` tokens at `now_ms`. Returns true, or false and an
    -- honest Retry-After in seconds (at least 1). A cost of nothing always
    -- passes (an empty push meters nothing). A cost above the burst never
    -- fits: it is refused with a third result, true, so the caller can say
    -- that no retry can pass it (the wait returned is a full bucket's, of
    -- no use to that caller); letting it through
    -- into debt would let a tenant granted 5 a second push 10,000 at once.
    function set.take(tenant, cost, rate, burst, now_ms)
        if rate == 0 or cost == 0 then return true end
        local b = buckets[tenant]
        if not b then
            if count >= sweep_at then sweep(now_ms) end
            b = { tokens = burst, at = now_ms, full_at = now_ms }
            buckets[tenant] = b
            count = count + 1
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

    -- Gives back what a push took when a later rung refused it (full_at
    -- stays where it was: later than need be, so the bucket is kept a
    -- little long).
    function set.refund(tenant, cost)
        local b = buckets[tenant]
        if b then b.tokens = b.tokens + cost end
    end

    -- Buckets held (for specs and the curious).
    function set.size()
        return count
    end

    function set.reset()
        buckets, count, sweep_at = {}, 0, _M.SWEEP_FLOOR
    end

    return set
end

-- The refusals' words, one place for the live ladder and a shadow's
-- (ephd.verdict), which must decide the same strings.
function _M.over_rate(rate)
    return "the tenant is over its rate of " .. rate
           .. (rate == 1 and " message" or " messages") .. " per second"
end

-- A push above the burst never fits, now or later: it is answered with no
-- Retry-After, and a split is offered only when there is one to make.
function _M.over_burst(cost, burst, messages)
    local text = "the push costs " .. cost .. ", more than the tenant's "
                 .. "burst of " .. burst .. ": no retry can pass it"
    if messages and messages > 1 then
        return text .. "; split it into pushes that cost at most " .. burst
    end
    return text .. ", and one message cannot be split"
end

-- The live policy's buckets, and the module's functions are theirs.
local live = _M.new()
_M.live = live
_M.take, _M.refund, _M.size, _M.reset = live.take, live.refund, live.size,
                                        live.reset

return _M
