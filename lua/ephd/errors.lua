-- The closed refusal taxonomy: every failure on the family is
-- {"error": "...", "code": "..."} with one of these codes, and the HTTP
-- status follows from the code.
local cjson = require("cjson.safe")

local encode = cjson.encode

local _M = {}

_M.STATUS = {
    ephemeral_bad_request = 400,
    ephemeral_quota_exceeded = 403,
    feature_gated = 403,
    ephemeral_queue_not_found = 404,
    queue_full = 429,
    rate_limited = 429,
    ephemeral_configure_failed = 500,
    ephemeral_delete_failed = 500,
    ephemeral_unavailable = 503,
    owner_moved = 503,
    ephemeral_forward_failed = 503,
    ephemeral_disabled = 503,
}

-- Identity refusals come from the API's access layer in front of the
-- family (as a gateway's do), so they carry the API's codes rather than
-- the family's: a missing or unknown credential, a level too weak.
_M.ACCESS = {
    unauthorized = 401,
    forbidden = 403,
}

-- The HTTP layer's own answer for a path that is no route: outside the
-- family's taxonomy too, since a client must not read it as the depth
-- read's ephemeral_queue_not_found, nor as a malformed request.
_M.ROUTING = {
    route_not_found = 404,
}

function _M.status(code)
    return _M.STATUS[code] or _M.ACCESS[code] or _M.ROUTING[code]
end

function _M.body(code, message)
    if not _M.status(code) then
        error("not a code of the taxonomy: " .. tostring(code), 2)
    end
    return '{"error":' .. encode(message) .. ',"code":"' .. code .. '"}'
end

-- status overrides the code's own for refusals of the HTTP layer around the
-- family (404 outside it, 405 wrong method), which still carry a code.
function _M.answer(respond, req, code, message, status, headers)
    local body = _M.body(code, message)
    respond(req, status or _M.status(code), headers, body, #body)
end

return _M
