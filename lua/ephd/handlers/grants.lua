-- The grant routes (admin, system: they answer while the family is
-- paused): the grants in force, and a grant set or removed. C writes the
-- row to queen.ephemeral_quota, reads every grant back and applies it
-- (ephd.store's apply_grants) before it answers, so a grant holds from
-- its answer on rather than from the next refresh.
local ffi = require("ffi")
local core = require("ephd.core")
local body = require("ephd.body")
local grants = require("ephd.grants")
local reply = require("ephd.reply")
local tenancy = require("ephd.tenancy")
local validate = require("ephd.validate")

local C = core.C
local config = core.config

local _M = {}

-- A grant write with no database: the ladder answers it, as every
-- refusal at commit (and a shadow sees it as refused).
local UNAVAILABLE = "no database connection is available for a grant write"

local function json_limit(v)
    return v and ("%d"):format(v) or "null"
end

-- GET /api/v1/system/grants: every grant in force, by tenant, and
-- whether a tenant without one is refused. Grants are the operator's own
-- rows, so listing them all is bounded by what the operator wrote.
_M.list = {
    parse = validate.no_query,
    commit = function(ctx)
        local tenants = {}
        for tenant in pairs(grants.all()) do tenants[#tenants + 1] = tenant end
        table.sort(tenants)
        local items = {}
        for i, tenant in ipairs(tenants) do
            local g = grants.get(tenant)
            -- A limit not set is null: the broker's default.
            items[i] = ('{"tenant":"%s","enabled":%s,"maxBytes":%s,'
                        .. '"maxQueues":%s,"maxMsgsPerSec":%s}'):format(
                tenant, tostring(g.enabled), json_limit(g.max_bytes),
                json_limit(g.max_queues), json_limit(g.max_msgs_per_sec))
        end
        reply.json(ctx.req, 200, ('{"grants":[%s],"count":%d,'
                                  .. '"requireGrant":%s}'):format(
            table.concat(items, ","), #items,
            tostring(config.require_grant ~= 0)))
        return 0
    end,
}

local FIELDS = { tenant = true, enabled = true, maxBytes = true,
                 maxQueues = true, maxMsgsPerSec = true }
-- The columns' types: max_bytes is a bigint, the others ints.
local LIMITS = { maxBytes = 2 ^ 53, maxQueues = 2 ^ 31 - 1,
                 maxMsgsPerSec = 2 ^ 31 - 1 }

local row = ffi.new("ephd_grant_row_t")

-- POST /api/v1/system/grants {"tenant", "enabled"?, "maxBytes"?,
-- "maxQueues"?, "maxMsgsPerSec"?}: the whole row; a limit not given is
-- NULL, the broker's default for it.
_M.set = {
    parse = function(ctx)
        local obj, err = body.object(ctx.req, FIELDS)
        if not obj then return err end
        if type(obj.tenant) ~= "string" or not tenancy.valid(obj.tenant) then
            return "tenant must be a UUID"
        end
        if obj.enabled ~= nil and type(obj.enabled) ~= "boolean" then
            return "enabled must be true or false"
        end
        for field, max in pairs(LIMITS) do
            local v = obj[field]
            if v ~= nil and (type(v) ~= "number" or v < 0 or v > max
                             or v ~= math.floor(v)) then
                return field .. " must be a whole number from 0 to "
                       .. string.format("%.0f", max)
            end
        end
        ctx.args = obj
    end,
    commit = function(ctx)
        local g = ctx.args
        local tenant = g.tenant:lower()
        row.tenant.ptr, row.tenant.len = tenant, #tenant
        row.enabled = g.enabled == false and 0 or 1
        row.max_bytes = g.maxBytes or -1
        row.max_queues = g.maxQueues or -1
        row.max_msgs_per_sec = g.maxMsgsPerSec or -1
        -- C copies the tenant before it returns.
        if C.ephd_ffi_grant_set(ctx.req, row) == C.EPHD_E_UNAVAILABLE then
            return 0, "ephemeral_unavailable", UNAVAILABLE
        end
        return 0
    end,
}

-- DELETE /api/v1/system/grants/:tenant: {"tenant", "deleted", "grants"};
-- a tenant with no grant is deleted = false, never a 404.
_M.delete = {
    parse = function(ctx)
        if not tenancy.valid(ctx.param) then return "tenant must be a UUID" end
        ctx.args = ctx.param:lower()
    end,
    commit = function(ctx)
        local tenant = ctx.args
        if C.ephd_ffi_grant_delete(ctx.req, tenant, #tenant)
                == C.EPHD_E_UNAVAILABLE then
            return 0, "ephemeral_unavailable", UNAVAILABLE
        end
        return 0
    end,
}

return _M
