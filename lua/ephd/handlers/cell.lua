-- The routes between the cell's members (core/cell/members.c): the readiness a
-- member asks before it places partitions on a newcomer, and the notice a
-- stopping member sends before it hands its partitions over.
local ffi = require("ffi")
local core = require("ephd.core")
local reply = require("ephd.reply")

local C = core.C
local ffi_string = ffi.string

local out = ffi.new("char[128]")

local _M = {}

function _M.ready(req)
    local status = C.ephd_ffi_cell_ready(out, 128)
    reply.json(req, status, ffi_string(out))
end

function _M.leaving(req)
    local rc = C.ephd_ffi_cell_leaving(req, out, 128)
    if rc == C.EPHD_E_REFUSED then
        return reply.refuse(req, "unauthorized",
                            "the leaving notice is only for the cell's "
                            .. "members", 401)
    elseif rc ~= C.EPHD_OK then
        return reply.refuse(req, "ephemeral_bad_request",
                            "a leaving notice is {\"id\",\"epoch\"}", 400)
    end
    reply.json(req, 200, ffi_string(out))
end

return _M
