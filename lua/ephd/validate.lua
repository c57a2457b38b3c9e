-- Shape rules shared by every handler: names, query parameters, integers
-- and booleans. Each check returns the value, or nil and a message for a
-- 400 ephemeral_bad_request.
local ffi = require("ffi")
local core = require("ephd.core")

local C = core.C
local byte, find, sub = string.byte, string.find, string.sub
local tonumber = tonumber

local MAX_NAME = core.config.max_name_bytes

local _M = {}

local decode_buf, decode_cap = nil, 0

-- Percent-decodes once, in C; most names carry no escape at all.
function _M.unescape(s, plus_is_space)
    if not find(s, "%", 1, true) and
            not (plus_is_space and find(s, "+", 1, true)) then
        return s
    end
    if #s > decode_cap then
        decode_cap = #s
        decode_buf = ffi.new("char[?]", decode_cap)
    end
    local n = C.ephd_ffi_url_decode(s, #s, decode_buf, plus_is_space and 1 or 0)
    if n < 0 then return nil, "malformed percent-encoding" end
    return ffi.string(decode_buf, n)
end

function _M.name(s, what)
    if s == nil then return nil, what .. " is required" end
    if s == "" then
        -- Only a push's partition is optional and yet refused empty.
        return nil, what .. " must not be empty"
                    .. (what == "partition" and " (leave it out for Default)"
                        or "")
    end
    if #s > MAX_NAME then
        return nil, what .. " is longer than " .. MAX_NAME .. " bytes"
    end
    -- Names are joined into one composite key: no control characters,
    -- C0, DEL or C1 (U+0080-U+009F, which UTF-8 spells C2 80-9F). A byte
    -- loop, because a pattern with a class leaves the JIT's trace.
    local high = false
    for i = 1, #s do
        local b = byte(s, i)
        if b < 32 or b == 127 then
            return nil, what .. " contains a control character"
        end
        if b >= 128 then
            high = true
            if b == 0xC2 then
                local n = byte(s, i + 1)
                if n and n >= 0x80 and n <= 0x9F then
                    return nil, what .. " contains a control character"
                end
            end
        end
    end
    -- Every answer that lists the name must stay parseable: strict UTF-8.
    -- Names from the JSON scanners were checked as they were walked; a
    -- percent-decoded one is checked here, and only if it is not ASCII.
    if high and C.ephd_ffi_utf8_valid(s, #s) ~= C.EPHD_OK then
        return nil, what .. " is not UTF-8 (RFC 3629)"
    end
    return s
end

-- A :queue path segment: one segment (a '/' in a name arrives as %2F),
-- percent-decoded exactly once, then a name.
function _M.segment(raw, what)
    if find(raw, "/", 1, true) then
        return nil, what .. " must be one path segment (a / in a name is "
                    .. "%2F)"
    end
    local s, err = _M.unescape(raw, false)
    if not s then return nil, err end
    return _M.name(s, what)
end

-- Parses a query string into a table; a repeated key is refused. An
-- unknown key is ignored, as Queen ignores it (an SDK newer than the broker
-- sends parameters this one does not know, and keeps working), except where
-- `strict` (the operator's system routes, where a typo such as `tennat`
-- silently reading everyone's is worse than a refusal).
function _M.query(qs, known, strict)
    local out = {}
    local pos, len = 1, #qs
    while pos <= len do
        local amp = find(qs, "&", pos, true) or len + 1
        local pair = sub(qs, pos, amp - 1)
        pos = amp + 1
        if pair ~= "" then
            local eq = find(pair, "=", 1, true)
            local rawk = eq and sub(pair, 1, eq - 1) or pair
            local rawv = eq and sub(pair, eq + 1) or ""
            local k, kerr = _M.unescape(rawk, true)
            if not k and strict then return nil, kerr end
            if k and known[k] then
                local v, verr = _M.unescape(rawv, true)
                if not v then return nil, verr end
                if out[k] then return nil, "repeated parameter " .. k end
                out[k] = v
            elseif strict then
                local names = {}
                for name in pairs(known) do names[#names + 1] = name end
                table.sort(names)
                return nil, "unknown parameter " .. k .. " (known: "
                            .. table.concat(names, ", ") .. ")"
            end
        end
    end
    return out
end

-- Queen's spellings, case and all. Anything else is refused where Queen
-- reads it as false: a pop asking wait=on would otherwise not wait, and
-- commitOnDelivery=on would leave leases the client never acks.
local BOOLEAN = { ["true"] = true, ["1"] = true, yes = true,
                  ["false"] = false, ["0"] = false, no = false }

-- A parse for a route that takes no query parameter (the system routes
-- are strict: docs/wire.md): the message of its 400, or nil.
function _M.no_query(ctx)
    if ctx.req.query.len > 0 then return "this route takes no parameters" end
end

function _M.boolean(v, what, default)
    if v == nil then return default end
    local b = BOOLEAN[v]
    if b == nil then
        return nil, what .. " must be true, 1, yes, false, 0 or no"
    end
    return b
end

-- A non-negative integer written in digits only (no sign, no fraction),
-- however many: the callers clamp it to a ceiling far below 2^53, under
-- which a double is exact, and a value too long for one is infinity, which
-- clamps alike.
function _M.integer(v, what, default)
    if v == nil then return default end
    if v == "" or find(v, "[^0-9]") then
        return nil, what .. " must be a non-negative integer"
    end
    return tonumber(v)
end

function _M.clamp(n, lo, hi)
    if n < lo then return lo end
    if n > hi then return hi end
    return n
end


return _M
