-- The system routes (admin): the kill switch, policy reload, metering, a
-- tenant's queues for the operator, /metrics and the cell's membership
-- (the grants are ephd.handlers.grants). They stay reachable while the
-- family is paused, or nobody could unpause.
local cjson = require("cjson.safe")
local ffi = require("ffi")
local core = require("ephd.core")
local body = require("ephd.body")
local hooks = require("ephd.hooks")
local killswitch = require("ephd.killswitch")
local limits = require("ephd.limits")
local log = require("ephd.log")
local metering = require("ephd.metering")
local reply = require("ephd.reply")
local shadow = require("ephd.shadow")
local tenancy = require("ephd.tenancy")
local validate = require("ephd.validate")

local C = core.C
local config = core.config
local encode = cjson.encode

local _M = {}

local function no_query(ctx)
    if ctx.req.query.len > 0 then return "this route takes no parameters" end
end

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
    parse = no_query,
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
        ctx.switch = obj
    end,
    commit = function(ctx)
        local s = ctx.switch
        killswitch.set(not s.enabled, s.retryAfter, s.reason,
                       C.ephd_ffi_wall_time())
        log.info("surface_switched", { enabled = s.enabled,
                                       reason = s.reason })
        reply.json(ctx.req, 200, state_body())
        return 0
    end,
}

-- POST /api/v1/system/policy/reload: C reads the files off the loop and
-- answers once the new policy is in, or refused.
_M.reload = {
    parse = no_query,
    commit = function(ctx)
        if C.ephd_ffi_policy_reload(ctx.req) == C.EPHD_E_UNAVAILABLE then
            reply.refuse(ctx.req, "ephemeral_unavailable",
                         "a policy reload is already running")
        end
        return 0
    end,
}

-- GET /metrics: C writes the broker's families; these are the ones only
-- Lua knows (the policy's, and a shadow's: ephd.shadow).
local policy = require("ephd.policy")

local function policy_families()
    local lines = {
        "# HELP queen_ephemeral_policy_hook_failures_total Policy hook calls "
        .. "that raised, returned garbage or overran their budget.",
        "# TYPE queen_ephemeral_policy_hook_failures_total counter",
    }
    for _, hook in ipairs(policy.HOOKS) do
        lines[#lines + 1] = ('queen_ephemeral_policy_hook_failures_total'
            .. '{hook="%s"} %d'):format(hook, hooks.failures[hook] or 0)
    end
    lines[#lines + 1] = "# HELP queen_ephemeral_policy_reloads_total "
                        .. "Policy reloads, by outcome."
    lines[#lines + 1] = "# TYPE queen_ephemeral_policy_reloads_total counter"
    lines[#lines + 1] = ('queen_ephemeral_policy_reloads_total{outcome="ok"} '
                         .. '%d'):format(hooks.reloads.ok)
    lines[#lines + 1] = ('queen_ephemeral_policy_reloads_total'
                         .. '{outcome="refused"} %d'):format(hooks.reloads.refused)
    -- The policy in force: its version as the value, its name as a label
    -- (one series; a reload to another name replaces it).
    local active = hooks.active
    lines[#lines + 1] = "# HELP queen_ephemeral_policy_version The version "
                        .. "of the policy in force, by name."
    lines[#lines + 1] = "# TYPE queen_ephemeral_policy_version gauge"
    lines[#lines + 1] = ('queen_ephemeral_policy_version{name="%s"} %.17g')
        :format(active.name:gsub('[\\"]', "\\%0"):gsub("\n", "\\n"),
                active.version)
    return table.concat(lines, "\n") .. "\n" .. shadow.metrics()
end

_M.metrics = {
    parse = no_query,
    commit = function(ctx)
        local extra = policy_families()
        C.ephd_ffi_metrics(ctx.req, extra, #extra)
        return 0
    end,
}

-- GET /api/v1/system/metering[?tenant=UUID | ?limit=N]: one tenant, or
-- the N holding the most bytes (100 by default, at most 1000) with the
-- count of every tenant. Never every tenant: with tenant ids the clients'
-- to choose there may be very many, and the dashboard asks every second.
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

_M.metering = {
    parse = function(ctx)
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
            ctx.param = { tenant = q.tenant:lower() }
            return
        end
        local limit
        limit, err = validate.integer(q.limit, "limit", METERING_LIMIT)
        if not limit then return err end
        if limit < 1 or limit > METERING_MAX then
            return "limit must be from 1 to " .. METERING_MAX
        end
        ctx.param = { limit = limit }
    end,
    commit = function(ctx)
        local p = ctx.param
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
    end,
}

-- GET /api/v1/system/queues[?tenant=UUID]: a tenant's queues (the
-- caller's without ?tenant=), as GET /api/v1/ephemeral/queues answers
-- them. The family's listing refuses while the surface is paused, as
-- every route of the family does (the contract: a paused surface says
-- nothing about any tenant); this one is the operator's, who paused it
-- and must still see what is held (ephd status, the dashboard).
local ONE_TENANT = { tenant = true }

_M.queues = {
    parse = function(ctx)
        local q, err = validate.query(ffi.string(ctx.req.query.ptr,
                                                 ctx.req.query.len), ONE_TENANT,
                                      true)
        if not q then return err end
        if q.tenant and not tenancy.valid(q.tenant) then
            return "tenant must be a UUID"
        end
        ctx.param = q.tenant and q.tenant:lower() or ctx.tenant
    end,
    commit = function(ctx)
        C.ephd_ffi_queues(ctx.req, ctx.param, #ctx.param)
        return 0
    end,
}

-- GET /api/v1/system/cell: this broker's own view of its cell, as its last
-- heartbeat read it (core/cell/members.c, docs/cell.md).
local cell = ffi.new("ephd_cell_t")
local member = ffi.new("ephd_cell_member_t")

local function cell_body()
    C.ephd_ffi_cell(cell)
    local members, self = {}, nil
    for i = 0, cell.members - 1 do
        if C.ephd_ffi_cell_member(i, member) == C.EPHD_OK then
            local m = {
                id = ffi.string(member.id, 16),
                address = ffi.string(member.address.ptr, member.address.len),
                epoch = ("%08x"):format(member.epoch),
                live = member.live ~= 0,
                ttlMs = tonumber(member.ttl_ms),
                seenMsAgo = tonumber(member.seen_ms_ago),
            }
            members[#members + 1] = m
            if i == cell.self then
                self = { id = m.id, address = m.address, epoch = m.epoch }
            end
        end
    end
    return encode({
        self = self,
        members = members,
        live = cell.live,
        ttlMs = tonumber(cell.ttl_ms),
        fresh = cell.fresh ~= 0,
        database = cell.database ~= 0,
        partitions = { held = tonumber(cell.partitions_held),
                       owned = tonumber(cell.partitions_owned) },
    })
end

_M.cell = {
    parse = no_query,
    commit = function(ctx)
        reply.json(ctx.req, 200, cell_body())
        return 0
    end,
}

return _M
