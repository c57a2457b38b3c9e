-- DELETE /api/v1/ephemeral/queue/:queue: the declaration first, then the
-- contents and cursors. C answers {queue, deleted, declared}; never a 404.
local core = require("ephd.core")
local validate = require("ephd.validate")

local C = core.C

local _M = {}

-- Sent marked by a member fanning out its delete (core/cell/fanout.h).
_M.members_send = true

function _M.parse(ctx)
    local queue, err = validate.segment(ctx.param, "queue")
    ctx.queue = queue or false
    return err
end

function _M.commit(ctx)
    local tenant, queue = ctx.tenant, ctx.queue
    if C.ephd_ffi_delete(ctx.req, tenant, #tenant, queue, #queue)
            == C.EPHD_E_UNAVAILABLE then
        return 0, "ephemeral_unavailable", "no database connection is "
                  .. "available to remove the declaration"
    end
    return 0
end

return _M
