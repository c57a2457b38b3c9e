-- GET /api/v1/ephemeral/queues/:queue/depth[?group=]: the one route of the
-- family that answers 404.
local ffi = require("ffi")
local core = require("ephd.core")
local validate = require("ephd.validate")

local C = core.C

local KNOWN = { group = true }

local _M = {}

function _M.parse(ctx)
    local queue, err = validate.segment(ctx.param, "queue")
    if not queue then return err end
    local q = ctx.req.query
    local params
    params, err = validate.query(ffi.string(q.ptr, q.len), KNOWN)
    if not params then return err end
    local group = params.group
    if group == "" then group = nil end -- queue mode's view, as the pop's
    if group then
        group, err = validate.name(group, "group")
        if not group then return err end
    end
    ctx.queue, ctx.group = queue, group
end

function _M.commit(ctx)
    local tenant, queue, group = ctx.tenant, ctx.queue, ctx.group
    if C.ephd_ffi_depth(ctx.req, tenant, #tenant, queue, #queue, group,
                    group and #group or 0) == C.EPHD_E_NOT_FOUND then
        return 0, "ephemeral_queue_not_found", "no queue " .. queue
    end
    return 0
end

return _M
