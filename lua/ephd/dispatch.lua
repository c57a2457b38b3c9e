-- The broker's entry points from C: dispatch (one call per request) and
-- the control-plane calls (policy init, reload and check; declarations and
-- grants loaded; the metering tick).
local ffi = require("ffi")
local contract = require("ephd.contract")
local core = require("ephd.core")
local declarations = require("ephd.declarations")
local grants = require("ephd.grants")
local hooks = require("ephd.hooks")
local ladder = require("ephd.ladder")
local limits = require("ephd.limits")
local log = require("ephd.log")
local metering = require("ephd.metering")
local policy = require("ephd.policy")
local rate = require("ephd.rate")
local reply = require("ephd.reply")
local requestlog = require("ephd.requestlog")
local router = require("ephd.router")
local shadow = require("ephd.shadow")

local C = core.C
local ffi_string = ffi.string
local request_slot = core.request_slot

-- Each route's handler, by id: the row names a module of ephd.handlers, or
-- a field of one.
local HANDLERS = {}
for i, r in ipairs(router.ROUTES) do
    local module, field = r.handler:match("^([%w_]+)%.?([%w_]*)$")
    local h = module and require("ephd.handlers." .. module)
    if field ~= "" then h = h and h[field] end
    if not h then
        error("ephd.routes: no handler " .. r.handler .. " for " .. r.name, 0)
    end
    HANDLERS[i] = h
end

local _M = {}

-- What policy code may read: clocks and a tenant's counters.
local API = {
    now = function() return C.ephd_ffi_wall_time() end,
    counters = metering.of,
}

-- `ephd policy check` has no engine behind it: every tenant is one never
-- seen.
local CHECK_API = {
    now = API.now,
    counters = function() return nil end,
}

-- Loading runs the policy's top level, which is policy code too: a
-- candidate's (a shadow's) within its share of the memory cap, which its
-- hooks keep (p.candidate, until a promotion makes it the live policy).
local function load(dir, files, default_dir, default_files, api, candidate)
    C.ephd_ffi_policy_enter(candidate and 1 or 0)
    local ok, p, err = pcall(policy.load, dir, files, default_dir,
                             default_files, api or API)
    C.ephd_ffi_policy_leave()
    if not ok then return nil, p end
    if not p then return nil, err end
    p.candidate = candidate
    return p
end

-- Returns true, name, version or nil, why.
function _M.init(dir, files, default_dir, default_files)
    for i, r in ipairs(router.ROUTES) do C.ephd_ffi_metrics_route(i, r.name) end
    local p, err = load(dir, files, default_dir, default_files)
    if not p then return nil, err end
    ladder.use(p)
    return true, p.name, p.version
end

-- A new policy replaces the old only if it loads; limits the old one
-- decided are forgotten, rate buckets and counters are kept.
function _M.reload(dir, files, default_dir, default_files)
    local p, err = load(dir, files, default_dir, default_files)
    if not p then
        hooks.reloads.refused = hooks.reloads.refused + 1
        return nil, err
    end
    ladder.use(p)
    hooks.reloads.ok = hooks.reloads.ok + 1
    limits.forget()
    return true, p.name, p.version
end

function _M.check(dir, files, default_dir, default_files)
    local p, err = load(dir, files, default_dir, default_files, CHECK_API)
    if not p then return nil, err end
    return true, p.name, p.version
end

_M.apply_declarations = declarations.apply

-- A push relayed to its owner and refused there gives back what the rate
-- took at this edge (core/cell/relay_edge.c), as a refusal here does.
_M.refund = rate.refund

local grant_row = ffi.new("ephd_grant_row_t")

local function column(v)
    v = tonumber(v)
    return v >= 0 and v or nil
end

function _M.apply_grants()
    local rows = {}
    for i = 0, C.ephd_ffi_store_rows() - 1 do
        C.ephd_ffi_store_grant(i, grant_row)
        rows[ffi_string(grant_row.tenant.ptr, grant_row.tenant.len)] =
            contract.grant(grant_row.enabled ~= 0,
                           column(grant_row.max_bytes),
                           column(grant_row.max_queues),
                           column(grant_row.max_msgs_per_sec))
    end
    grants.replace(rows)
    limits.forget()
    shadow.forget()
end

-- The metering tick: each tenant's counts since the last tick go to the
-- policy's meter hook, and every record it returns is logged as one
-- logfmt line, for a billing pipeline that reads the log. `last` is
-- rebuilt from what C reports at each tick, so a tenant C forgot is
-- forgotten here too; one C forgot and met again (a new born) counts
-- from zero.
local last = {}
local ZERO = { pushed = 0, delivered = 0 }

function _M.meter()
    if not hooks.active.hooks.meter then
        last = {}
        return
    end
    local deltas, now = {}, {}
    metering.each(function(tenant, t)
        local before = last[tenant]
        if not before or before.born ~= t.born then
            before = ZERO
        end
        deltas[#deltas + 1] = contract.delta(
            tenant, t.pushed - before.pushed, t.delivered - before.delivered,
            t.parked, t.bytes, t.queues)
        now[tenant] = { pushed = t.pushed, delivered = t.delivered,
                        born = t.born }
    end)
    last = now
    local ok, records = hooks.call("meter", deltas)
    if not ok then return end
    local bad = contract.check.meter(records)
    if bad then return hooks.reject("meter", bad) end
    for _, r in ipairs(records or {}) do log.info("meter", r) end
end

-- Tenants whose last metered counts are kept (for specs).
function _M.metered()
    local n = 0
    for _ in pairs(last) do n = n + 1 end
    return n
end

-- One context, refilled per request: dispatch is never re-entered (a push
-- that wakes a parked pop answers it in C) and nothing keeps a context
-- past its request. Every field the rungs and handlers fill is here from
-- the start, so filling one never grows the table; building it per
-- request, and rehashing it as it grew, had been a tenth of a push.
-- `request` is what policy hooks see, made only for a hook that runs
-- (ephd.ladder).
-- What a handler's parse hands its commit in C (a scan, a pop's arguments,
-- a configure's options) is the request's own operation, ctx.req.op, and
-- is read through the request each time: a cdata pointer stored in this
-- table would be boxed, an allocation per request.
local ctx = {
    req = false, route = false, param = false, handler = false,
    family = false, request = false, tenant = false, level = false,
    limits = false, taken = false, queue = false,
    partition = false, messages = false, bytes = false, group = false,
    switch = false, forwarded = false, code = false, rung = false,
}

requestlog.context(ctx)

-- A candidate to judge beside the live policy (ephd.shadow), loaded as a
-- reload loads: it replaces the shadow in place only if it loads.
function _M.shadow(dir, files, default_dir, default_files)
    local p, err = load(dir, files, default_dir, default_files, nil, true)
    if not p then return nil, err end
    shadow.start(p, dir)
    -- What the last request left: not for the new shadow to judge.
    ctx.req, ctx.code, ctx.rung = false, false, false
    return true, p.name, p.version
end

-- After dispatch, while a shadow is loaded (C calls it then, and only
-- then: a call of its own, so the live request's trace stays as short as
-- without one): the shadow judges the request the ladder decided, if it
-- did (ctx.req is set for it alone, and cleared here), its answer
-- written. ctx.code and ctx.rung say what the ladder refused with.
function _M.observe()
    local c = ctx
    if not c.req then return end
    local s = shadow.current
    if s then shadow.observe(c, s) end
    c.req, c.code, c.rung = false, false, false
end

function _M.dispatch()
    local req = request_slot[0]
    local route, status, message, allow = router.route(req)
    if not route then
        -- Nobody yet, for the refusal log; nothing for a shadow to judge
        -- (ctx.req is left set by a dispatch that raised, which C does
        -- not observe, and that request's buffers are gone).
        ctx.req, ctx.route, ctx.tenant = false, false, false
        return reply.refuse(req, status == 404 and "route_not_found"
                                 or "ephemeral_bad_request", message, status,
                            allow)
    end
    local id = route.id
    C.ephd_ffi_request_route(req, id)
    if route.class == "open" then
        ctx.req = false
        return HANDLERS[id](req)
    end
    local c = ctx
    c.req, c.route = req, route
    c.param = route.param and router.param()
    c.handler, c.family = HANDLERS[id], route.class == "family"
    c.request, c.tenant, c.level, c.limits, c.taken = false, false, false,
                                                      false, false
    c.queue, c.partition, c.messages, c.bytes = false, false, false, false
    c.group, c.switch = false, false
    -- Marked as relayed by a member of the cell: the identity rung trusts
    -- the mark or refuses the request (ephd.ladder). Read here, not in
    -- the rung: there the same read cost a push ~300 instructions more
    -- (callgrind), here nothing measurable.
    c.forwarded = req.forward.len ~= 0
    return ladder.run(c)
end

return _M
