-- GET /api/v1/ephemeral/queues/:queue/depth[?group=]: the one route of the
-- family that answers 404.
local ffi = require("ffi")
local core = require("ephd.core")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C

local KNOWN = { group = true }

return function(req, tenant, raw)
    local queue, err = validate.unescape(raw, false)
    if queue then queue, err = validate.name(queue, "queue") end
    if not queue then return reply.bad_request(req, err) end
    local q
    q, err = validate.query(ffi.string(req.query.ptr, req.query.len), KNOWN)
    local group = q and q.group
    if group then group, err = validate.name(group, "group") end
    if err then return reply.bad_request(req, err) end
    if C.ephd_depth(req, tenant, #tenant, queue, #queue, group,
                    group and #group or 0) == C.EPHD_E_NOT_FOUND then
        return reply.refuse(req, "ephemeral_queue_not_found",
                            "no queue " .. queue)
    end
end
