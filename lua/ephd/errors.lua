-- Error answers from Lua: every failure is {"error": "...", "code": "..."}
-- with a code of the one list (ephd.codes, which C's errors share), and the
-- HTTP status follows from the code.
local cjson = require("cjson.safe")
local codes = require("ephd.codes")

local encode = cjson.encode

local _M = {}

-- code -> status, for every code of the list.
_M.STATUS = {}
for _, c in ipairs(codes.CODES) do _M.STATUS[c.code] = c.status end

function _M.status(code)
    return _M.STATUS[code]
end

function _M.body(code, message)
    if not _M.STATUS[code] then
        error("not a code of the taxonomy: " .. tostring(code), 2)
    end
    return '{"error":' .. encode(message) .. ',"code":"' .. code .. '"}'
end

-- status overrides the code's own for refusals of the HTTP layer around the
-- family (404 outside it, 405 wrong method), which still carry a code.
function _M.answer(respond, req, code, message, status, headers)
    local body = _M.body(code, message)
    respond(req, status or _M.STATUS[code], headers, body, #body)
end

return _M
