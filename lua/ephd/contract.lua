-- One contract per hook of the policy API: what each hook is given (the
-- builders below, which the broker and ephd.testing both use) and what it
-- may return (check). The broker's ladder, its limits cache and its
-- metering tick refuse a result here, and ephd.testing raises on it here,
-- so an operator's spec fails on exactly the results the broker would
-- answer with 503, with the message the broker logs (policy_hook_failed
-- hook=... error="<the message>"). Pure Lua: operators' specs load it
-- without a broker.
local access = require("ephd.access")
local codes = require("ephd.codes")
local options = require("ephd.options")

local find, floor, format = string.find, math.floor, string.format
local ipairs, pairs, type, tostring = ipairs, pairs, type, tostring

local _M = {}

local CODE = {}
for _, c in ipairs(codes.CODES) do CODE[c.code] = true end

-- The hooks, in the order a request meets them (queue_options when a
-- commit creates an implicit queue, meter on a timer).
_M.HOOKS = { "paused", "authenticate", "limits", "admit", "cost",
             "queue_options", "meter" }

-- The codes admit may refuse with: the answers to "this request is not
-- for this tenant now", whose statuses a client already handles.
-- rate_limited alone carries a Retry-After (its third result, seconds,
-- 1 by default).
_M.ADMIT_CODES = { "ephemeral_quota_exceeded", "queue_full", "rate_limited",
                   "ephemeral_bad_request", "forbidden" }
local ADMIT_CODE = {}
for _, c in ipairs(_M.ADMIT_CODES) do ADMIT_CODE[c] = true end

-- The longest a paused hook may ask clients to wait, as the switch route.
_M.MAX_RETRY_AFTER = 86400

-- Integers exactly representable in a double.
_M.MAX_COUNT = 2 ^ 53

local UUID = "^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-"
             .. "%x%x%x%x%x%x%x%x%x%x%x%x$"

-- Tenants are UUIDs, as in queen's tables.
function _M.is_tenant(t)
    return type(t) == "string" and find(t, UUID) ~= nil
end

-- What a value was, for a message: short, and printable.
local function shown(v)
    if type(v) == "string" then
        return format("%q", #v > 40 and v:sub(1, 40) .. "..." or v)
    elseif type(v) == "number" or type(v) == "boolean" or v == nil then
        return tostring(v)
    end
    return "a " .. type(v)
end

-- Arguments -------------------------------------------------------------

-- paused(request) and authenticate(request); tenant is nil for paused.
function _M.request(route, method, path, authorization, tenant)
    return { route = route, method = method, path = path,
             authorization = authorization, tenant = tenant }
end

-- admit(request): the route's name, the identity established, and the
-- names and counts the request carries (nil where it carries none: a
-- pop's partition or group, a push's group; messages and bytes are a
-- push's alone).
function _M.admission(route, tenant, level, queue, partition, group,
                      messages, bytes)
    return { route = route, tenant = tenant, level = level, queue = queue,
             partition = partition, group = group, messages = messages,
             bytes = bytes }
end

-- limits(tenant, grant, defaults): a grant row (nil fields are SQL NULL)
-- and the broker's knobs.
function _M.grant(enabled, max_bytes, max_queues, max_msgs_per_sec)
    return { enabled = enabled, max_bytes = max_bytes,
             max_queues = max_queues, max_msgs_per_sec = max_msgs_per_sec }
end

function _M.defaults(rate, burst, max_parked, max_queues)
    return { rate = rate, burst = burst, max_parked = max_parked,
             max_queues = max_queues }
end

-- cost(push): bytes of payload, as sent.
function _M.push(tenant, queue, partition, messages, bytes)
    return { tenant = tenant, queue = queue, partition = partition,
             messages = messages, bytes = bytes }
end

-- meter(deltas): a list of these, pushed and delivered since the last
-- call, the rest as they are now.
function _M.delta(tenant, pushed, delivered, parked, bytes, queues)
    return { tenant = tenant, pushed = pushed, delivered = delivered,
             parked = parked, bytes = bytes, queues = queues }
end

-- Results ---------------------------------------------------------------

-- check[hook](results...): nothing for results the broker takes, or why
-- it does not.
local CHECK = {}
_M.check = CHECK

-- Written so NaN fails: it compares false with everything.
function CHECK.paused(after, reason)
    if after == nil then return end
    if type(after) ~= "number"
            or not (after >= 1 and after <= _M.MAX_RETRY_AFTER) then
        return "paused must return nothing, or seconds from 1 to "
               .. _M.MAX_RETRY_AFTER .. " and a reason: got " .. shown(after)
    end
    if reason ~= nil and type(reason) ~= "string" then
        return "paused's reason must be a string: got " .. shown(reason)
    end
end

local IDENTITY = { tenant = true, level = true }

function CHECK.authenticate(who, reason)
    if who == nil then return end
    if type(who) == "string" then
        if not CODE[who] then
            return "authenticate refused with " .. shown(who)
                   .. ", which is not a code of the taxonomy"
        end
        if reason ~= nil and type(reason) ~= "string" then
            return "authenticate's reason must be a string: got "
                   .. shown(reason)
        end
        return
    end
    if type(who) ~= "table" then
        return "authenticate must return nothing, {tenant = uuid, level = "
               .. "level} or code, reason: got " .. shown(who)
    end
    for k in pairs(who) do
        if not IDENTITY[k] then
            return "authenticate's identity has a field " .. shown(k)
                   .. " besides tenant and level"
        end
    end
    if not _M.is_tenant(who.tenant) then
        return "authenticate's identity needs a UUID tenant: got "
               .. shown(who.tenant)
    end
    if not access.is_level(who.level) then
        return "authenticate's identity needs a level (read-only, "
               .. "write-only, read-write, admin): got " .. shown(who.level)
    end
end

local LIMITS = { rate = true, burst = true, max_bytes = true,
                 max_queues = true, max_parked = true }

-- NaN fails `v >= 0`, the infinities and anything past 2^53 the upper
-- bound, fractions the floor.
function CHECK.limits(t)
    if type(t) ~= "table" then
        return "limits must return a table: got " .. shown(t)
    end
    for k, v in pairs(t) do
        if not LIMITS[k] then
            return "limits returned a field " .. shown(k) .. " besides "
                   .. "rate, burst, max_bytes, max_queues and max_parked"
        end
        if type(v) ~= "number" or not (v >= 0 and v < _M.MAX_COUNT)
                or v ~= floor(v) then
            return "limits' " .. k .. " must be a whole number from 0 to "
                   .. "2^53 - 1 (or nil): got " .. shown(v)
        end
    end
end

function CHECK.admit(code, message, after)
    if code == nil then return end
    if not ADMIT_CODE[code] then
        return "admit refused with " .. shown(code) .. ", which is not one "
               .. "of " .. table.concat(_M.ADMIT_CODES, ", ")
    end
    if message ~= nil and type(message) ~= "string" then
        return "admit's message must be a string: got " .. shown(message)
    end
    if after == nil then return end
    if code ~= "rate_limited" then
        return "admit gives a Retry-After with rate_limited only: got "
               .. shown(after) .. " with " .. code
    end
    if type(after) ~= "number"
            or not (after >= 1 and after <= _M.MAX_RETRY_AFTER) then
        return "admit's Retry-After must be seconds from 1 to "
               .. _M.MAX_RETRY_AFTER .. ": got " .. shown(after)
    end
end

-- The options a configure would accept, checked by the same code
-- (ephd.options), so a queue_options answer means what the same options
-- declared would; nil is the broker's defaults.
function CHECK.queue_options(o)
    if o == nil then return end
    local ok, why = options.check(o)
    if not ok then return "queue_options returned bad options: " .. why end
end

function CHECK.cost(tokens)
    if type(tokens) ~= "number" or not (tokens >= 0 and tokens < 1 / 0) then
        return "cost must return a finite non-negative number: got "
               .. shown(tokens)
    end
end

local SCALAR = { string = true, number = true, boolean = true }

function CHECK.meter(records)
    if records == nil then return end
    if type(records) ~= "table" then
        return "meter must return nothing or a list of records: got "
               .. shown(records)
    end
    -- A list: n keys, each a whole number from 1 to n.
    local n = 0
    for _ in pairs(records) do n = n + 1 end
    for k in pairs(records) do
        if type(k) ~= "number" or not (k >= 1 and k <= n)
                or k ~= floor(k) then
            return "meter must return a list of records: it has a key "
                   .. shown(k)
        end
    end
    for i, r in ipairs(records) do
        if type(r) ~= "table" then
            return "meter's record " .. i .. " must be a table: got "
                   .. shown(r)
        end
        for k, v in pairs(r) do
            if type(k) ~= "string" or not find(k, "^[%w_]+$")
                    or not SCALAR[type(v)] then
                return "meter's record " .. i .. " must map names to "
                       .. "strings, numbers or booleans: " .. shown(k)
                       .. " is " .. shown(v)
            end
        end
    end
end

return _M
