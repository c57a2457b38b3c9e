-- Answers from Lua: errors of the taxonomy and small JSON bodies. The hot
-- answers (pop batches, ack results, status reads) are written by C.
local core = require("ephd.core")
local errors = require("ephd.errors")

local C = core.C

local _M = {}

local function respond(req, status, headers, body, len)
    C.ephd_ffi_respond(req, status, headers, body, len)
end

function _M.json(req, status, body)
    C.ephd_ffi_respond(req, status, nil, body, #body)
end

-- A message may quote what the client sent (a path, a parameter's name);
-- the answer must still be UTF-8 JSON, so bytes that are not are shown as
-- '?' (rarely: names and bodies were checked before any message quotes
-- them).
local function utf8(message)
    if C.ephd_ffi_utf8_valid(message, #message) == C.EPHD_OK then
        return message
    end
    return (message:gsub("[\128-\255]", "?"))
end

function _M.refuse(req, code, message, status, headers)
    errors.answer(respond, req, code, utf8(message), status, headers)
end

function _M.bad_request(req, message)
    errors.answer(respond, req, "ephemeral_bad_request", utf8(message))
end

return _M
