-- GET /api/v1/system/metering[?tenant=UUID | ?limit=N] (admin, system): one
-- tenant, or the N holding the most bytes (100 by default, at most 1000)
-- with the count of every tenant. Never every tenant: with tenant ids the
-- clients' to choose there may be very many, and the dashboard asks every
-- second.
local cjson = require("cjson.safe")
local ffi = require("ffi")
local limits = require("ephd.limits")
local metering = require("ephd.metering")
local reply = require("ephd.reply")
local tenancy = require("ephd.tenancy")
local validate = require("ephd.validate")

local encode = cjson.encode

local _M = {}

local METERING = { tenant = true, limit = true }
local METERING_LIMIT, METERING_MAX = 100, 1000

local function tenants_json(list)
    return #list > 0 and encode(list) or "[]"
end

-- The one tenant's limits in force, as the policy's limits hook decided
-- them (0: no limit); nothing when the hook failed.
local function limits_json(tenant)
    local l = limits.get(tenant)
    if not l then return "" end
    return ',"limits":' .. encode({
        rate = l.rate, burst = l.burst,
        maxBytes = tonumber(l.c.max_bytes),
        maxQueues = tonumber(l.c.max_queues),
        maxParked = tonumber(l.c.max_parked),
    })
end

function _M.parse(ctx)
    local q, err = validate.query(ffi.string(ctx.req.query.ptr,
                                             ctx.req.query.len), METERING,
                                  true)
    if not q then return err end
    if q.tenant and q.limit then
        return "tenant and limit do not go together"
    end
    if q.tenant then
        if not tenancy.valid(q.tenant) then
            return "tenant must be a UUID"
        end
        ctx.args = { tenant = q.tenant:lower() }
        return
    end
    local limit
    limit, err = validate.integer(q.limit, "limit", METERING_LIMIT)
    if not limit then return err end
    if limit < 1 or limit > METERING_MAX then
        return "limit must be from 1 to " .. METERING_MAX
    end
    ctx.args = { limit = limit }
end

function _M.commit(ctx)
    local p = ctx.args
    if p.tenant then
        local t = metering.of(p.tenant)
        if t then t.tenant = p.tenant end
        reply.json(ctx.req, 200, '{"tenants":' .. tenants_json({ t })
                   .. limits_json(p.tenant) .. '}')
        return 0
    end
    local top, count = metering.top(p.limit)
    reply.json(ctx.req, 200, '{"tenants":' .. tenants_json(top)
               .. ',"count":' .. count .. '}')
    return 0
end

return _M
