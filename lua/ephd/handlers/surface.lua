-- The family's surface (admin, system): its state and the kill switch that
-- pauses it. They answer while the family is paused, or nobody could
-- unpause.
local cjson = require("cjson.safe")
local core = require("ephd.core")
local body = require("ephd.body")
local hooks = require("ephd.hooks")
local killswitch = require("ephd.killswitch")
local log = require("ephd.log")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C
local config = core.config
local encode = cjson.encode

local _M = {}

local function state_body()
    local s = killswitch.state()
    return encode({
        enabled = not s.paused,
        retryAfter = s.paused and (s.retry_after
                                   or tonumber(config.retry_after_s)) or nil,
        reason = s.reason,
        since = s.since,
        -- What cellBytes of the listing is measured against (the
        -- dashboard's gauge).
        cellMaxBytes = tonumber(config.max_cell_bytes),
        policy = { name = hooks.active.name, version = hooks.active.version,
                   failures = hooks.failures, reloads = hooks.reloads },
    })
end

-- GET /api/v1/system/ephemeral
_M.status = {
    parse = validate.no_query,
    commit = function(ctx)
        reply.json(ctx.req, 200, state_body())
        return 0
    end,
}

local SWITCH_FIELDS = { enabled = true, retryAfter = true, reason = true }

-- POST /api/v1/system/ephemeral {"enabled", "retryAfter"?, "reason"?}
_M.switch = {
    parse = function(ctx)
        local obj, err = body.object(ctx.req, SWITCH_FIELDS)
        if not obj then return err end
        if type(obj.enabled) ~= "boolean" then
            return "enabled must be true or false"
        end
        local after = obj.retryAfter
        if after ~= nil and (type(after) ~= "number" or after < 1
                             or after ~= math.floor(after)
                             or after > 86400) then
            return "retryAfter must be whole seconds from 1 to 86400"
        end
        if obj.reason ~= nil and (type(obj.reason) ~= "string"
                                  or #obj.reason > 512) then
            return "reason must be a string of at most 512 bytes"
        end
        ctx.args = obj
    end,
    commit = function(ctx)
        local s = ctx.args
        killswitch.set(not s.enabled, s.retryAfter, s.reason,
                       C.ephd_ffi_wall_time())
        log.info("surface_switched", { enabled = s.enabled,
                                       reason = s.reason })
        reply.json(ctx.req, 200, state_body())
        return 0
    end,
}

return _M
