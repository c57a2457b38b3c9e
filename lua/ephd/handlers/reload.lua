-- POST /api/v1/system/policy/reload (admin, system): C reads the files off
-- the loop and answers once the new policy is in, or refused
-- (ephd.lifecycle).
local core = require("ephd.core")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C

local _M = {}

_M.parse = validate.no_query

function _M.commit(ctx)
    if C.ephd_ffi_policy_reload(ctx.req) == C.EPHD_E_UNAVAILABLE then
        reply.refuse(ctx.req, "ephemeral_unavailable",
                     "a policy reload is already running")
    end
    return 0
end

return _M
