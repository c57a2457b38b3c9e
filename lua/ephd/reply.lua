-- Answers from Lua: errors of the taxonomy and small JSON bodies. The hot
-- answers (pop batches, ack results, status reads) are written by C.
local core = require("ephd.core")
local errors = require("ephd.errors")

local C = core.C

local _M = {}

local function respond(req, status, headers, body, len)
    C.ephd_respond(req, status, headers, body, len)
end

function _M.json(req, status, body)
    C.ephd_respond(req, status, nil, body, #body)
end

function _M.refuse(req, code, message, status, headers)
    errors.answer(respond, req, code, message, status, headers)
end

function _M.bad_request(req, message)
    errors.answer(respond, req, "ephemeral_bad_request", message)
end

return _M
