-- What a web page may not make a visitor's browser do here. Any page can
-- have a browser send a POST whose body is text/plain or a form (no CORS
-- preflight is needed for those) and a GET from an <img>, with whatever
-- the network grants the visitor: flipping the kill switch, draining a
-- queue with autoAck. So a POST body must be declared application/json,
-- which a page on another origin cannot send without a preflight this
-- broker never answers; and a request a browser marks as coming from
-- another origin is refused unless EPHD_ALLOWED_ORIGINS lets it in.
local ffi = require("ffi")
local core = require("ephd.core")

local ffi_string = ffi.string
local lower, find, match, gsub, sub = string.lower, string.find,
                                      string.match, string.gsub, string.sub

local _M = {}

-- true (every origin), or a set of lowercased origins.
local allowed

-- list: EPHD_ALLOWED_ORIGINS as core/config.c validated it.
function _M.allow(list)
    if list == "*" then
        allowed = true
        return
    end
    allowed = {}
    for item in list:gmatch("[^,]+") do allowed[lower(item)] = true end
end

local configured = core.config.allowed_origins
_M.allow(configured ~= nil and ffi_string(configured) or "")

local function text(s)
    return lower(ffi_string(s.ptr, s.len))
end

-- Returns why req comes from a foreign origin, or nothing. The Origin
-- header decides when there is one (browsers send it on every POST and
-- every CORS request): same origin is its host[:port] equal to Host. The
-- requests browsers send without it (an <img>, a link) carry
-- Sec-Fetch-Site instead, in browsers since 2020-2023; older ones send
-- neither and are not told apart from curl.
function _M.foreign(req)
    if allowed == true then return end
    local o = req.origin
    if o.len > 0 then
        local origin = text(o)
        if allowed[origin] then return end
        local authority = match(origin, "^https?://([^/]+)$")
        if authority and authority == text(req.host) then return end
        return "requests from another origin are not allowed here"
    end
    local s = req.fetch_site
    if s.len > 0 then
        local site = text(s)
        if site == "cross-site" or site == "same-site" then
            return "requests from another site are not allowed here"
        end
    end
end

-- Returns why a POST's body is refused, or nothing. JSON is
-- application/json or a structured-syntax type ending in +json (RFC 6839:
-- application/vnd.api+json), in any case and with parameters
-- (application/json; charset=utf-8); none of them is a type a page can
-- send without a preflight. A POST without a body needs no Content-Type.
-- A forward mark reaching here was trusted by the ladder's identity rung:
-- it came from a member of the cell, never from a page, and a hand-over's
-- body is a transfer, not JSON (core/cell/transfer.h).
function _M.not_json(req)
    if req.json ~= 0 then return end -- exactly application/json, seen by C
    if req.forward.len ~= 0 then return end
    local t = req.content_type
    if t.len == 0 then
        if req.body.len == 0 then return end
        return "a request body needs Content-Type: application/json"
    end
    local ct = ffi_string(t.ptr, t.len)
    if ct == "application/json" then return end
    local media = gsub(match(lower(ct), "^[^;]*"), "[ \t]+$", "")
    if media == "application/json"
            or find(media, "^application/[%w!#$&^_.-]+%+json$") then
        return
    end
    return "a request body must be application/json, not " .. sub(ct, 1, 100)
end

return _M
