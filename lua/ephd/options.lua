-- configure's closed option list: what a declaration may say, checked
-- whole before anything is written.
local null = require("cjson").null

local _M = {}

_M.KEYS = {
    "maxBytes", "maxLength", "policy", "ttlSeconds", "leaseSeconds",
    "retryLimit", "windowBuffer",
}
local KNOWN = {}
for _, k in ipairs(_M.KEYS) do KNOWN[k] = true end

local INTEGERS = {
    maxBytes = true, maxLength = true, ttlSeconds = true,
    leaseSeconds = true, retryLimit = true,
}
local POLICIES = { reject = true, dropOldest = true }

-- What lua-cjson yields for a non-negative integer literal: a double,
-- which above 2^53 has lost digits (and past ~1e308 is infinity). That is
-- harmless: the declaration is stored as sent (PostgreSQL takes it from
-- the body, and jsonb keeps every digit) and answered from what was
-- stored, while the double only meets the ceilings of the values in
-- force, all far below 2^53. Whether it is an integer is the literal's
-- question (see literal below); NaN is not one.
local function integer(v)
    return type(v) == "number" and v >= 0 and v == math.floor(v)
end

-- Whether member k of the JSON object text raw is written in digits only.
local function literal(raw, k)
    if raw == nil then return true end
    local text = require("ephd.body").raw(raw, k)
    return text ~= nil and text:find("^%d+$") ~= nil
end

-- The broker's ceilings on values in force, as Queen's engine clamps them.
-- A stored declaration keeps what was sent; what runs is clamped here, and
-- the status reads publish it. maxBytes and maxLength have none of their
-- own: QUEEN_EPHEMERAL_QUEUE_MAX_BYTES and _MAX_LENGTH are both their
-- default and their ceiling (Queen's), so one configure cannot put more in
-- force than the operator's knobs allow.
_M.CEILINGS = {
    ttlSeconds = 7 * 86400,
    leaseSeconds = 86400,
    retryLimit = 1000,
    windowMs = 60000,
    windowCount = 10000,
}

local function clamp(v, lo, hi)
    if v < lo then return lo end
    if v > hi then return hi end
    return v
end

-- maxBytes, maxLength and leaseSeconds of 0 mean the default (Queen's):
-- a bound of 0 would refuse every push and a lease of 0 redeliver at once.
local function given(v, default)
    if v == nil or v == 0 then return default end
    return v
end

-- Fills an ephd_options_t with the values in force for checked options:
-- absent ones take the broker's defaults (each configure replaces the whole
-- declaration), then everything is clamped.
function _M.in_force(o, config, out)
    local d, c = config.defaults, _M.CEILINGS
    local max_bytes, max_length = tonumber(d.max_bytes), tonumber(d.max_length)
    out.max_bytes = clamp(given(o.maxBytes, max_bytes), 1, max_bytes)
    out.max_length = clamp(given(o.maxLength, max_length), 1, max_length)
    if o.policy then
        out.drop_oldest = o.policy == "dropOldest" and 1 or 0
    else
        out.drop_oldest = d.drop_oldest
    end
    out.ttl_s = clamp(o.ttlSeconds or 0, 0, c.ttlSeconds)
    out.lease_s = clamp(given(o.leaseSeconds, tonumber(d.lease_s)), 1,
                        c.leaseSeconds)
    out.retry_limit = clamp(o.retryLimit or tonumber(d.retry_limit), 0,
                            c.retryLimit)
    -- A count of 0 is off whatever ms says, and so is an ms of 0 (a woken
    -- pop waits up to ms for the count: 0 waits for nothing): published
    -- {ms: 0, count: 0}, as Queen publishes off.
    local wb = o.windowBuffer
    local on = wb and wb.count > 0 and wb.ms > 0
    out.window_count = on and clamp(wb.count, 0, c.windowCount) or 0
    out.window_ms = on and clamp(wb.ms, 0, c.windowMs) or 0
    return out
end

-- Returns the options table or nil and the message of a 400. raw, when
-- given, is the options' JSON text: lua-cjson reads 1.0 as 1, and only an
-- integer literal is an integer here.
function _M.check(options, raw)
    if options == nil then return {} end
    if type(options) ~= "table" or options[1] ~= nil then
        return nil, "options must be an object"
    end
    -- ephd.body reads JSON text through the broker's C: a table without
    -- its text (a policy's queue_options, in ephd.testing too) needs none.
    local body = raw and require("ephd.body")
    if raw and body.repeats(raw, options) then
        return nil, "an option appears more than once"
    end
    for k, v in pairs(options) do
        if not KNOWN[k] then
            return nil, "unknown option " .. tostring(k) .. " (options: "
                        .. table.concat(_M.KEYS, ", ") .. ")"
        end
        if INTEGERS[k] and not (integer(v) and literal(raw, k)) then
            return nil, k .. " must be a non-negative integer"
        end
        if k == "policy" and not POLICIES[v] then
            return nil, "policy must be reject or dropOldest"
        end
        if k == "windowBuffer" and v == null then
            -- Off, as earlier brokers published it: what they published
            -- can still be sent back.
            options.windowBuffer = nil
        elseif k == "windowBuffer" then
            if type(v) ~= "table" then
                return nil, "windowBuffer must be {ms, count}"
            end
            local wraw = raw and body.raw(raw, "windowBuffer")
            if wraw and body.repeats(wraw, v) then
                return nil, "windowBuffer repeats ms or count"
            end
            for wk, wv in pairs(v) do
                if wk ~= "ms" and wk ~= "count" then
                    return nil, "windowBuffer is {ms, count} and nothing else"
                end
                if not (integer(wv) and literal(wraw, wk)) then
                    return nil, "windowBuffer." .. wk
                                .. " must be a non-negative integer"
                end
            end
            if v.ms == nil or v.count == nil then
                return nil, "windowBuffer needs both ms and count"
            end
        end
    end
    return options
end

return _M
