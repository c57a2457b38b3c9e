-- Logging from Lua in the broker's one shape: C writes ts, level and event;
-- this formats the fields as logfmt, keys sorted, values quoted when they
-- need it. Events, and the opt-in request logs (ephd.requestlog): nothing
-- here is meant for a per-message path.
local core = require("ephd.core")

local C = core.C

local _M = {}

local byte, concat = string.byte, table.concat

-- Bare when it can be: not empty, and no space, '=', quote, backslash or
-- control character. A loop over bytes rather than a pattern, which
-- LuaJIT does not compile: a request log line quotes a path each request.
local function bare(v)
    if v == "" then return false end
    for i = 1, #v do
        local b = byte(v, i)
        if b <= 32 or b == 61 or b == 34 or b == 92 or b == 127 then
            return false
        end
    end
    return true
end

local function quote(v)
    v = tostring(v)
    if bare(v) then return v end
    return '"' .. v:gsub('[\\"]', "\\%0"):gsub("\n", "\\n"):gsub("%c", " ")
           .. '"'
end

local function usable(k, v)
    local kind = type(v)
    return type(k) == "string" and k:find("^[%w_]+$")
           and (kind == "string" or kind == "number" or kind == "boolean")
end

local parts = {}

-- The fields of t named in keys, in that order (those t lacks left out).
function _M.ordered(keys, t)
    local n = 0
    for i = 1, #keys do
        local k = keys[i]
        local v = t[k]
        if v ~= nil then
            n = n + 1
            parts[n] = k .. "=" .. quote(v)
        end
    end
    local line = concat(parts, " ", 1, n)
    for i = 1, n do parts[i] = nil end
    return line
end

function _M.fields(t)
    local keys = {}
    for k, v in pairs(t or {}) do
        if usable(k, v) then keys[#keys + 1] = k end
    end
    table.sort(keys)
    return _M.ordered(keys, t)
end

-- An operator's text as a log line or an admin answer carries it: at most
-- EXCERPT bytes, cut before a character, and how long it was. A hook may
-- raise with any string, and one of 24 MB was logged whole.
local EXCERPT = 512

function _M.excerpt(text)
    text = tostring(text)
    if #text <= EXCERPT then return text end
    local n = EXCERPT
    while n > 0 and byte(text, n + 1) >= 0x80 and byte(text, n + 1) < 0xC0 do
        n = n - 1
    end
    return text:sub(1, n) .. "... (" .. #text .. " bytes)"
end

for _, level in ipairs({ "info", "warn", "error" }) do
    _M[level] = function(event, t)
        C.ephd_ffi_log_fields(level, event, _M.fields(t))
    end
end

-- An info line of fields already formatted (ordered).
function _M.line(event, fields)
    C.ephd_ffi_log_fields("info", event, fields)
end

return _M
