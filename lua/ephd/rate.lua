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
    -- passes (an empty push meters nothing). A cost above the burst passes
    -- from a full bucket and leaves it in debt, so a retry does pass, as
    -- the contract promises of a 429, and the tenant's rate holds over
    -- time: a tenant granted 5 a second that pushes 10,000 at once waits
    -- 2,000 s before its next push.
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
        local ok = tokens >= need
        if ok then tokens = tokens - cost end
        b.tokens = tokens
        -- When it will hold its burst again, at this rate.
        b.full_at = now_ms + (burst - tokens) * 1000 / rate
        if ok then return true end
        local wait = ceil((need - tokens) / rate)
        return false, wait < 1 and 1 or wait
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

-- The refusal's words, one place for the live ladder and a shadow's
-- (ephd.verdict), which must decide the same strings. A push above the
-- burst waits for a full bucket: said, so its longer wait is no surprise.
function _M.over_rate(rate, cost, burst)
    local text = "the tenant is over its rate of " .. rate
                 .. (rate == 1 and " message" or " messages") .. " per second"
    if cost and cost > burst then
        text = text .. "; this push costs " .. cost .. ", more than its "
               .. "burst of " .. burst .. ": it passes from a full bucket"
    end
    return text
end

-- The live policy's buckets, and the module's functions are theirs.
local live = _M.new()
_M.live = live
_M.take, _M.refund, _M.size, _M.reset = live.take, live.refund, live.size,
                                        live.reset

return _M
