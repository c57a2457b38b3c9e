-- DELETE /api/v1/ephemeral/queue/:queue: the declaration first, then the
-- contents and cursors. C answers {queue, deleted, declared}; never a 404.
local core = require("ephd.core")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C

return function(req, tenant, raw)
    local queue, err = validate.unescape(raw, false)
    if queue then queue, err = validate.name(queue, "queue") end
    if not queue then return reply.bad_request(req, err) end
    if C.ephd_delete(req, tenant, #tenant, queue, #queue)
            == C.EPHD_E_UNAVAILABLE then
        return reply.refuse(req, "ephemeral_unavailable",
                            "no database connection is available to remove "
                            .. "the declaration")
    end
end
