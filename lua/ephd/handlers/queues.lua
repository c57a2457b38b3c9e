-- GET /api/v1/ephemeral/queues: this tenant's queues, written by C from
-- memory alone.
local core = require("ephd.core")

local C = core.C

local _M = {}

-- It takes no parameters, and ignores any, as Queen does (validate.query).
function _M.parse() end

function _M.commit(ctx)
    C.ephd_ffi_queues(ctx.req, ctx.tenant, #ctx.tenant)
    return 0
end

return _M
