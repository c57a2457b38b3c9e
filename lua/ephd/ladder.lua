-- The live ladder: the rungs (ephd.rungs, which hold the order, the checks
-- and their messages) run against the broker's state, then the handler's
-- commit, whose budget bits C reports and the first rung holding one of
-- them answers. A shadow policy and `ephd policy replay` run the same
-- rungs against a candidate's state (ephd.verdict).
local ffi = require("ffi")
local core = require("ephd.core")
local browser = require("ephd.browser")
local grants = require("ephd.grants")
local hooks = require("ephd.hooks")
local implicit = require("ephd.implicit")
local killswitch = require("ephd.killswitch")
local limits = require("ephd.limits")
local rate = require("ephd.rate")
local reply = require("ephd.reply")
local requestlog = require("ephd.requestlog")
local rungs = require("ephd.rungs")
local tenancy = require("ephd.tenancy")

local C = core.C
local config = core.config
local ffi_string = ffi.string
local band, bor = require("bit").band, require("bit").bor

local _M = {}

_M.ORDER = rungs.ORDER

-- Each budget rung's bits, as C reports them (EPHD_REFUSE_<name>).
local BIT = {}
for _, rung in ipairs(rungs.ORDER) do
    if rung.bits then
        local mask = 0
        for _, name in ipairs(rung.bits) do
            BIT[name] = C["EPHD_REFUSE_" .. name]
            mask = bor(mask, BIT[name])
        end
        rung.mask = mask
    end
end

-- The level of an identity the broker takes without the policy vouching
-- for it. An x-queen-tenant header is a claim anyone can make, so it never
-- holds admin: the kill switch, a reload and every tenant's metering need
-- an identity from the policy's authenticate hook. Without tenancy headers
-- the broker has one tenant and whoever reaches its port is its operator
-- (`ephd status` and the dashboard work with no credentials); guarding the
-- port is then the network's job, or the policy's.
local function unvouched_level()
    return config.tenancy_header ~= 0 and "read-write" or "admin"
end

local mark_tenant = ffi.new("ephd_slice_t")

-- A request relayed by a member of the cell carries the forward mark: the
-- tenant the edge established, signed with the cell token (core/cell/mark.h),
-- having run the whole
-- ladder. Trusted, it stands for identity, grant and rate, all charged at
-- the edge; untrusted, it is a credential this broker does not know, so
-- unauthorized (401), whatever else the request carries: nobody skips the
-- ladder without the token. The tenant it carries, or nil, why, code.
local function forwarded(ctx)
    local rc = C.ephd_ffi_forward_tenant(ctx.req, mark_tenant)
    if rc == C.EPHD_E_REFUSED then
        return nil, "the forward mark is not signed with this cell's token "
                    .. "for this request, or has expired", "unauthorized"
    elseif rc ~= C.EPHD_OK then
        return nil, "the forward mark's tenant must be a lowercase UUID",
               "unauthorized"
    end
    -- What a member sends marked: a routed verb (core/cell/routing.h), an
    -- admin verb it fans out (core/cell/fanout.h), or a hand-over
    -- (core/cell/handover.h), as each handler declares; a mark on any other
    -- is refused.
    local route, handler = ctx.route, ctx.handler
    if not (handler.routed or handler.members_send) then
        return nil, route.name .. " is never relayed", "forbidden"
    end
    return ffi_string(mark_tenant.ptr, mark_tenant.len)
end

-- What a hook's request holds, read from C's request.
local function seen(req)
    return ffi_string(req.method.ptr, req.method.len),
           ffi_string(req.path.ptr, req.path.len),
           ffi_string(req.authorization.ptr, req.authorization.len)
end

-- The broker's state: the policy in force and everything the rungs keep
-- outside it, so a reload keeps them.
local LIVE = {
    holder = hooks, call = hooks.call, reject = hooks.reject,
    switch = killswitch.paused, retry_after_s = tonumber(config.retry_after_s),
    tenant = tenancy.tenant, unvouched = unvouched_level, seen = seen,
    gated = grants.gated, require_grant = config.require_grant ~= 0,
    limits = limits.get, take = rate.take, clock = C.ephd_ffi_now_ms,
    foreign = browser.foreign, forwarded = forwarded,
    not_json = browser.not_json,
}

-- The outermost rung holding one of the bits C reported.
function _M.budget(refusals)
    for i = 1, #rungs.ORDER do
        local rung = rungs.ORDER[i]
        if rung.mask and band(refusals, rung.mask) ~= 0 then return rung end
    end
    error("no rung for refusal bits " .. tostring(refusals))
end

-- ctx.code and ctx.rung say what the live policy answered, for a shadow
-- policy to be compared with (ephd.shadow); only a refusal writes them.
local function refused(ctx, code, message, headers, rung)
    ctx.code, ctx.rung = code, rung
    if ctx.taken then rate.refund(ctx.tenant, ctx.taken) end
    return reply.refuse(ctx.req, code, message, nil, headers)
end

-- Where the cell's count of members lives (ffi.h): read, not called, so a
-- broker alone pays nothing for routing.
local cell_size = C.ephd_ffi_cell_size()

-- After every rung has passed: the handler's commit, whose budget bits
-- answer by the outermost rung holding one; or its own refusal, a code
-- and message it returns after them (a depth's unknown queue, a
-- declaration without a database). A routed verb in a cell, or a
-- member's relay, asks first where it is served (core/cell/routing.h):
-- decided once, here, for every verb, and answered by C when it is not
-- this broker (relayed, or owner_moved), so no commit knows of the cell.
local function committed(ctx)
    local handler = ctx.handler
    local verb = handler.routed
    if verb and (cell_size[0] > 1 or ctx.forwarded) then
        local tenant = ctx.tenant
        if C.ephd_ffi_cell_route(ctx.req, verb, tenant, #tenant,
                                 ctx.taken or 0) ~= C.EPHD_OK then
            return
        end
    end
    local refusals, code, message = handler.commit(ctx)
    if refusals and refusals ~= 0 then
        local rung = _M.budget(refusals)
        message = rungs.budget_message(rung, refusals, BIT, ctx.limits)
        return refused(ctx, rung.code, message, rung.headers, "commit")
    end
    if code then return refused(ctx, code, message, nil, "commit") end
end

-- With QUEEN_EPHEMERAL_LOG_REQUESTS on, each decision is logged
-- (ephd.requestlog): the request is read just before its answer is
-- written, while its buffers are still C's to lend, and the line written
-- once it is. Off, the ladder is compiled without a trace of it.
local function logged(refused, committed)
    return function(ctx, code, message, headers, rung)
        requestlog.decided(ctx, false, rung)
        refused(ctx, code, message, headers, rung)
        return requestlog.done(ctx)
    end, function(ctx)
        requestlog.decided(ctx, true)
        committed(ctx)
        return requestlog.done(ctx)
    end
end

-- Runs a request through every rung, then its handler's commit: one
-- ladder compiled per set of optional rungs (ephd.rungs: admit), the one
-- for the policy in force chosen as it is swapped in (use), so a policy
-- without admit runs a ladder without it.
local answer, commit = refused, committed
if requestlog.requests then answer, commit = logged(refused, committed) end
local PLAIN = rungs.compile(LIVE, answer, commit, {})
local ADMITTING = rungs.compile(LIVE, answer, commit, { admit = true })

_M.run = PLAIN

-- Puts policy p in force: the one way the live policy changes (the
-- broker's first load, a reload, a promotion).
function _M.use(p)
    hooks.active = p
    _M.run = p.hooks.admit and ADMITTING or PLAIN
    implicit.use(p)
end

return _M
