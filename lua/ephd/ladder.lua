-- The refusal ladder: when several refusals apply, the outermost is the
-- answer, so it names the reason an operator would act on and a paused
-- surface leaks nothing about a tenant. ORDER is the whole order, pinned
-- by spec/ephd/ladder_spec.lua: rungs with a check run in turn before
-- anything changes; budgets are checked by C in one pass at commit and
-- reported as bits, and the first rung here holding one of them answers.
local ffi = require("ffi")
local core = require("ephd.core")
local access = require("ephd.access")
local browser = require("ephd.browser")
local contract = require("ephd.contract")
local grants = require("ephd.grants")
local hooks = require("ephd.hooks")
local killswitch = require("ephd.killswitch")
local limits = require("ephd.limits")
local rate = require("ephd.rate")
local reply = require("ephd.reply")
local requestlog = require("ephd.requestlog")
local tenancy = require("ephd.tenancy")

local C = core.C
local config = core.config
local ffi_string = ffi.string
local band, bor = require("bit").band, require("bit").bor

local _M = {}

local function retry_after(seconds)
    return "Retry-After: " .. seconds .. "\r\n"
end

local HOOK_FAILED = "the policy could not decide this request"

-- What policy hooks see, made when the first hook that runs needs it: a
-- table of its own per request, since a hook may keep it, and none at all
-- while the policy defines neither paused nor authenticate.
local function hook_request(ctx)
    local request = ctx.request
    if not request then
        local req = ctx.req
        request = contract.request(
            ctx.route.name, ffi_string(req.method.ptr, req.method.len),
            ffi_string(req.path.ptr, req.path.len),
            ffi_string(req.authorization.ptr, req.authorization.len))
        ctx.request = request
    end
    return request
end

-- Each check returns nothing to pass, or message, headers, code to refuse
-- (code defaults to the rung's).

local function paused(ctx)
    if not ctx.family then return end
    local s = killswitch.state()
    if s.paused then
        return killswitch.paused_reason(),
               retry_after(s.retry_after or tonumber(config.retry_after_s))
    end
    if not hooks.defines("paused") then return end
    local ok, after, reason = hooks.call("paused", hook_request(ctx))
    if not ok then return HOOK_FAILED, nil, "ephemeral_unavailable" end
    local bad = contract.check.paused(after, reason)
    if bad then
        hooks.reject("paused", bad)
        return HOOK_FAILED, nil, "ephemeral_unavailable"
    end
    if after == nil then return end
    return reason or "paused by policy", retry_after(math.ceil(after))
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
-- ladder without the token.
local function forwarded(ctx)
    local rc = C.ephd_ffi_forward_tenant(ctx.req, mark_tenant)
    if rc == C.EPHD_E_REFUSED then
        return "the forward mark is not signed with this cell's token for "
               .. "this request, or has expired", nil, "unauthorized"
    elseif rc ~= C.EPHD_OK then
        return "the forward mark's tenant must be a lowercase UUID", nil,
               "unauthorized"
    end
    -- What a member sends marked: a routed verb (core/cell/routing.h), an
    -- admin verb it fans out (core/cell/fanout.h), or a hand-over
    -- (core/cell/handover.h), as each handler declares; a mark on any other
    -- is refused.
    local route, handler = ctx.route, ctx.handler
    if not (handler.routed or handler.members_send) then
        return route.name .. " is never relayed", nil, "forbidden"
    end
    ctx.tenant = ffi_string(mark_tenant.ptr, mark_tenant.len)
    ctx.level = route.level
end

-- A request a browser marks as another origin's is refused first here,
-- after the kill switch and before identity: a page's forgery says nothing
-- about who sent it.
local function authenticated(ctx)
    local foreign = browser.foreign(ctx.req)
    if foreign then return foreign, nil, "forbidden" end
    if ctx.forwarded then return forwarded(ctx) end
    local tenant, why = tenancy.tenant(ctx.req)
    if not tenant then return why, nil, "unauthorized" end
    local level = unvouched_level()
    if hooks.defines("authenticate") then
        local request = hook_request(ctx)
        request.tenant = tenant
        local ok, who, reason = hooks.call("authenticate", request)
        if not ok then return HOOK_FAILED, nil, "ephemeral_unavailable" end
        local bad = contract.check.authenticate(who, reason)
        if bad then
            hooks.reject("authenticate", bad)
            return HOOK_FAILED, nil, "ephemeral_unavailable"
        end
        if type(who) == "string" then
            return reason or "refused by policy", nil, who
        elseif who then
            tenant, level = who.tenant:lower(), who.level
        end
    end
    -- Established before the level is checked, so a refusal for the
    -- level names who was refused (ephd.requestlog).
    ctx.tenant = tenant
    ctx.level = level
    local route = ctx.route
    if not access.allows(level, route.level) then
        return route.name .. " needs " .. route.level
               .. " access, this credential has " .. level, nil, "forbidden"
    end
end

local function granted(ctx)
    if ctx.family and not ctx.forwarded and grants.gated(ctx.tenant, config.require_grant ~= 0) then
        return "the tenant is not granted ephemeral queues"
    end
end

local function shaped(ctx)
    if ctx.route.method == "POST" then
        local why = browser.not_json(ctx.req)
        if why then return why end
    end
    return ctx.handler.parse(ctx)
end

-- The tenant's limits are asked for only here, past the grant and the
-- shape, so a request refused earlier leaves no state behind it: tenant
-- ids are the client's to choose.
local function within_rate(ctx)
    if not ctx.family then return end
    local l = limits.get(ctx.tenant)
    if not l then return HOOK_FAILED, nil, "ephemeral_unavailable" end
    ctx.limits = l
    local cost = ctx.messages
    if not cost or ctx.forwarded then return end
    if not hooks.active.messages_cost then
        local ok
        ok, cost = hooks.call("cost", contract.push(
            ctx.tenant, ctx.queue, ctx.partition, cost, ctx.bytes))
        if not ok then return HOOK_FAILED, nil, "ephemeral_unavailable" end
        local bad = contract.check.cost(cost)
        if bad then
            hooks.reject("cost", bad)
            return HOOK_FAILED, nil, "ephemeral_unavailable"
        end
    end
    local taken, wait = rate.take(ctx.tenant, cost, l.rate, l.burst,
                                  tonumber(C.ephd_ffi_now_ms()))
    if not taken then
        return rate.over_rate(l.rate, cost, l.burst), retry_after(wait)
    end
    ctx.taken = cost
end

_M.ORDER = {
    { code = "ephemeral_disabled", check = paused, rung = "paused" },
    { code = "unauthorized", check = authenticated, rung = "authenticate" },
    { code = "feature_gated", check = granted, rung = "grant" },
    { code = "ephemeral_bad_request", check = shaped, rung = "shape" },
    { code = "rate_limited", check = within_rate, rung = "rate",
      bit = C.EPHD_REFUSE_PARKED, headers = retry_after(1),
      message = "the tenant has every parked-pop slot in use" },
    { code = "queue_full",
      bit = bor(C.EPHD_REFUSE_QUEUE_FULL, C.EPHD_REFUSE_QUEUE_TOO_SMALL,
                C.EPHD_REFUSE_QUEUE_CROWDED),
      message = "the queue is at maxBytes or maxLength and its policy "
                .. "is reject",
      -- Under dropOldest too: a retry cannot help, only a smaller push.
      too_small = "the push alone is over the queue's maxBytes or "
                  .. "maxLength: it cannot fit even in an empty queue",
      crowded = "the queue is at maxBytes or maxLength and dropOldest "
                .. "evicts from the pushed partition only, which holds "
                .. "too little to make room" },
    -- Names the allowances hit (one, nearly always), each with the limit
    -- an operator would raise; ctx.limits is the rate rung's, which every
    -- family request passes. ephd.verdict words its estimate of the
    -- tenant's bytes alike.
    { code = "ephemeral_quota_exceeded",
      bit = bor(C.EPHD_REFUSE_TENANT_BYTES, C.EPHD_REFUSE_TENANT_QUEUES,
                C.EPHD_REFUSE_QUEUE_PARTS, C.EPHD_REFUSE_QUEUE_GROUPS),
      prefix = "at an ephemeral allowance: ",
      which = {
          { bit = C.EPHD_REFUSE_TENANT_BYTES, phrase = function(ctx)
              return "the tenant's bytes (limit " .. ctx.limits.max_bytes
                     .. ")" end },
          { bit = C.EPHD_REFUSE_TENANT_QUEUES, phrase = function(ctx)
              return "the tenant's queues (limit " .. ctx.limits.max_queues
                     .. ")" end },
          { bit = C.EPHD_REFUSE_QUEUE_PARTS, phrase = function()
              return "the queue's partitions "
                     .. "(QUEEN_EPHEMERAL_MAX_PARTITIONS)" end },
          { bit = C.EPHD_REFUSE_QUEUE_GROUPS, phrase = function()
              return "the queue's named groups (QUEEN_EPHEMERAL_MAX_GROUPS)"
          end },
      } },
    { code = "ephemeral_unavailable", bit = C.EPHD_REFUSE_CELL_BYTES,
      message = "the broker is at QUEEN_EPHEMERAL_MAX_BYTES" },
}

-- The outermost rung holding one of the bits C reported.
function _M.budget(refusals)
    for i = 1, #_M.ORDER do
        local rung = _M.ORDER[i]
        if rung.bit and band(refusals, rung.bit) ~= 0 then return rung end
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
-- answer by the outermost rung holding one. A routed verb in a cell, or a
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
    local refusals = handler.commit(ctx)
    if refusals and refusals ~= 0 then
        local rung = _M.budget(refusals)
        local message = rung.message
        if rung.too_small
           and band(refusals, C.EPHD_REFUSE_QUEUE_TOO_SMALL) ~= 0 then
            message = rung.too_small
        elseif rung.crowded
           and band(refusals, C.EPHD_REFUSE_QUEUE_CROWDED) ~= 0 then
            message = rung.crowded
        end
        if rung.which then
            local hit = {}
            for _, w in ipairs(rung.which) do
                if band(refusals, w.bit) ~= 0 then
                    hit[#hit + 1] = w.phrase(ctx)
                end
            end
            message = rung.prefix .. table.concat(hit, "; ")
        end
        return refused(ctx, rung.code, message, rung.headers, "commit")
    end
end

-- ORDER compiled into one straight function, each check a constant
-- upvalue: a request is one trace through known calls. A loop over ORDER
-- made the JIT trace each rung as a side trace of the loop (its call a
-- different function each turn), and a chain of closures left a guard
-- per call: 1,300 and 450 instructions a push more (callgrind).
local function compile(order, refused, committed)
    local head, body = {}, {}
    for i, rung in ipairs(order) do
        if rung.check then
            head[#head + 1] = ("local check_%d = order[%d].check\n")
                              :format(i, i)
            body[#body + 1] = ("message, headers, code = check_%d(ctx)\n"
                .. "if message then return refused(ctx, code or "
                .. "order[%d].code, message, headers, order[%d].rung) end\n")
                :format(i, i, i)
        end
    end
    local source = "local order, refused, committed = ...\n"
        .. table.concat(head) .. "return function(ctx)\n"
        .. "local message, headers, code\n" .. table.concat(body)
        .. "return committed(ctx)\nend\n"
    return assert(load(source, "=ephd.ladder.run"))(order, refused, committed)
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

-- Runs a request through every rung, then its handler's commit.
if requestlog.requests then
    _M.run = compile(_M.ORDER, logged(refused, committed))
else
    _M.run = compile(_M.ORDER, refused, committed)
end

return _M
