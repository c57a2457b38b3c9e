-- POST /api/v1/ephemeral/handover: a partition handed over by its old
-- owner (core/cell/handover.h), from a member of the cell only. C reads the
-- transfer and merges it, charged like a push: the queue's bounds and the
-- budgets are this broker's to check, and refuse it as they would a push.
local ffi = require("ffi")
local core = require("ephd.core")

local C = core.C
local ffi_string = ffi.string

local _M = {}

-- Sent marked by a member only (core/cell/handover.h).
_M.members_send = true

function _M.parse(ctx)
    if not ctx.forwarded then
        return "the hand-over is only for the cell's members", nil,
               "forbidden"
    end
    local req = ctx.req
    if C.ephd_ffi_transfer_check(req) ~= C.EPHD_OK then
        return ffi_string(req.op.scan.message)
    end
end

-- The commit answers its own 200.
function _M.commit(ctx)
    local rc = C.ephd_ffi_transfer_commit(ctx.req, ctx.tenant, #ctx.tenant,
                                          ctx.limits.c)
    if rc ~= C.EPHD_OK then return ctx.req.op.refusals end
    return 0
end

return _M
