-- GET /api/v1/ephemeral/queues: this tenant's queues, written by C from
-- memory alone.
local ffi = require("ffi")
local core = require("ephd.core")
local reply = require("ephd.reply")

local C = core.C

return function(req, tenant)
    if req.query.len > 0 then
        return reply.bad_request(req, "the queue list takes no parameters: "
                                 .. ffi.string(req.query.ptr, req.query.len))
    end
    C.ephd_queues(req, tenant, #tenant)
end
