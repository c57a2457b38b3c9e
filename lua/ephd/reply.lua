-- Answers from Lua: errors of the taxonomy and small JSON bodies. The hot
-- answers (pop batches, ack results, status reads) are written by C. An
-- error goes to C with its code, which /metrics counts, and to
-- ephd.requestlog when a request log is on: who got which code.
local core = require("ephd.core")
local errors = require("ephd.errors")
local requestlog = require("ephd.requestlog")

local C = core.C
local logged = requestlog.refusals or requestlog.requests

local _M = {}

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
    message = utf8(message)
    local body = errors.body(code, message)
    status = status or errors.STATUS[code]
    if logged then requestlog.refused(code, status, message) end
    C.ephd_ffi_refuse(req, errors.INDEX[code], status, headers, body, #body)
end

function _M.bad_request(req, message)
    _M.refuse(req, "ephemeral_bad_request", message)
end

return _M
