-- Error answers from Lua: every failure is {"error": "...", "code": "..."}
-- with a code of the one list (ephd.codes, which C's errors share), and the
-- HTTP status follows from the code.
local cjson = require("cjson.safe")
local codes = require("ephd.codes")

local encode = cjson.encode

local _M = {}

-- code -> status, and code -> its place in the list from 0 (C's
-- ephd_code_t, which the build generates from the same list in order).
_M.STATUS, _M.INDEX = {}, {}
for i, c in ipairs(codes.CODES) do
    _M.STATUS[c.code] = c.status
    _M.INDEX[c.code] = i - 1
end

function _M.status(code)
    return _M.STATUS[code]
end

function _M.body(code, message)
    if not _M.STATUS[code] then
        error("not a code of the taxonomy: " .. tostring(code), 2)
    end
    return '{"error":' .. encode(message) .. ',"code":"' .. code .. '"}'
end

return _M
