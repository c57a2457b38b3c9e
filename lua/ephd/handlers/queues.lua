-- GET /api/v1/ephemeral/queues: this tenant's queues, written by C from
-- memory alone.
local ffi = require("ffi")
local core = require("ephd.core")

local C = core.C

local _M = {}

function _M.parse(ctx)
    local q = ctx.req.query
    if q.len > 0 then
        return "the queue list takes no parameters: "
               .. ffi.string(q.ptr, q.len)
    end
end

function _M.commit(ctx)
    C.ephd_ffi_queues(ctx.req, ctx.tenant, #ctx.tenant)
    return 0
end

return _M
