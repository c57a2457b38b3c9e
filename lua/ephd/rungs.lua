-- The refusal ladder's rungs, once: their order, their checks, their
-- messages and the request table a policy hook sees. When several
-- refusals apply, the outermost is the answer, so it names the reason an
-- operator would act on and a paused surface leaks nothing about a
-- tenant. ORDER is the whole order, pinned by spec/ephd/ladder_spec.lua:
-- rungs with a check run in turn before anything changes; budgets are
-- checked by C in one pass at commit and reported as bits, and the first
-- rung holding one of them answers.
--
-- The checks run against a state, as a plugin runs against its context:
-- the live ladder's (ephd.ladder: the policy in force, the broker's kill
-- switch, grants, limits cache and rate buckets) or a candidate's
-- (ephd.verdict, for the shadow and `ephd policy replay`: its own limits
-- and buckets, the same grants). So a shadow decides as the live ladder
-- does by construction, with the same strings. Pure Lua, loaded by the
-- CLI's plain LuaJIT too; what only a broker has (C's request, the cell's
-- forward mark, a browser's headers, a handler's parse) its state brings.
--
-- A state (every function called with plain arguments, and captured once
-- by compile, so the live ladder's checks call what they called before it
-- had a state):
--   holder        a table whose `active` is the policy deciding
--   call(hook, ...)   ok, results: the policy's hook, guarded
--   reject(hook, why) a result the contract refuses
--   switch()      the kill switch: reason, retry-after seconds; nil when on
--   retry_after_s the kill switch's Retry-After when it names none
--   tenant(req)   the tenant read, or nil and why
--   unvouched()   the level of an identity the policy did not vouch for
--   seen(req)     method, path, authorization: what a hook's request holds
--   gated(tenant, require_grant), require_grant: the grant rule
--   limits(tenant)    the tenant's limits (ephd.limits), nil when failed
--   take(tenant, cost, rate, burst, now_ms), clock(): its rate buckets
--   and, the broker's alone (a rung without them is not run):
--   foreign(req)  a browser's forgery, or nil
--   forwarded(ctx)    the tenant a member's forward mark carries, or nil,
--                 why, code
--   not_json(req) a POST's body that is not JSON, or nil
-- A request is a context (ephd.context): the router's route (its row),
-- family, req (what tenant, seen, foreign and not_json read), forwarded
-- and handler (its parse, when the shape rung runs), and, once parsed,
-- the handler's queue, partition, group, messages, bytes. The rungs write
-- their part alone: request, tenant, level, limits and taken.
local access = require("ephd.access")
local contract = require("ephd.contract")
local rate = require("ephd.rate")

local band = require("bit").band
local ceil = math.ceil

local _M = {}

-- The messages the rungs answer with; ORDER's budget rungs hold theirs.
_M.HOOK_FAILED = "the policy could not decide this request"
_M.PAUSED = "paused by policy"
_M.REFUSED = "refused by policy"
_M.NOT_GRANTED = "the tenant is not granted ephemeral queues"
_M.NO_TENANT = "x-queen-tenant must be a UUID"

local HOOK_FAILED = _M.HOOK_FAILED

function _M.retry_after(seconds)
    return "Retry-After: " .. seconds .. "\r\n"
end
local retry_after = _M.retry_after

-- The level an access check refuses, in the words of the refusal.
function _M.no_access(route, level)
    return route.name .. " needs " .. route.level
           .. " access, this credential has " .. level
end

-- The order. A rung names its check (checks below, by `rung`), or the
-- engine's budget bits it answers at commit, by their names in ffi.h
-- (EPHD_REFUSE_<name>): the broker turns them into bits, this module
-- needs no C.
_M.ORDER = {
    { code = "ephemeral_disabled", rung = "paused" },
    { code = "unauthorized", rung = "authenticate" },
    { code = "feature_gated", rung = "grant" },
    { code = "ephemeral_bad_request", rung = "shape" },
    -- The policy's admit hook: past the shape, which parses the names and
    -- counts it sees, and before the rate, so a push it refuses takes no
    -- tokens. Its code is the hook's (contract.ADMIT_CODES); `hook` makes
    -- the rung absent from a ladder compiled for a policy without one.
    { code = "forbidden", rung = "admit", hook = "admit" },
    { code = "rate_limited", rung = "rate",
      bits = { "PARKED" }, headers = retry_after(1),
      message = "the tenant has every parked-pop slot in use" },
    { code = "queue_full",
      bits = { "QUEUE_FULL", "QUEUE_TOO_SMALL", "QUEUE_CROWDED" },
      message = "the queue is at maxBytes or maxLength and its policy "
                .. "is reject",
      -- Under dropOldest too: a retry cannot help, only a smaller push.
      too_small = "the push alone is over the queue's maxBytes or "
                  .. "maxLength: it cannot fit even in an empty queue",
      crowded = "the queue is at maxBytes or maxLength and dropOldest "
                .. "evicts from the pushed partition only, which holds "
                .. "too little to make room" },
    -- Names the allowances hit (one, nearly always), each with the limit
    -- an operator would raise, from the tenant's limits (the rate rung's,
    -- which every family request passes); a shadow's estimate of the
    -- tenant's bytes (ephd.verdict) says so in `note`.
    { code = "ephemeral_quota_exceeded",
      bits = { "TENANT_BYTES", "TENANT_QUEUES", "QUEUE_PARTS",
               "QUEUE_GROUPS" },
      prefix = "at an ephemeral allowance: ",
      which = {
          TENANT_BYTES = function(l, note)
              return "the tenant's bytes (limit " .. l.max_bytes
                     .. (note or "") .. ")" end,
          TENANT_QUEUES = function(l)
              return "the tenant's queues (limit " .. l.max_queues .. ")"
          end,
          QUEUE_PARTS = function()
              return "the queue's partitions "
                     .. "(QUEEN_EPHEMERAL_MAX_PARTITIONS)" end,
          QUEUE_GROUPS = function()
              return "the queue's named groups (QUEEN_EPHEMERAL_MAX_GROUPS)"
          end,
      } },
    { code = "ephemeral_unavailable", bits = { "CELL_BYTES" },
      message = "the broker is at QUEEN_EPHEMERAL_MAX_BYTES" },
}

_M.RUNG = {}
for _, r in ipairs(_M.ORDER) do _M.RUNG[r.rung or r.code] = r end

-- The budget rung's message for the bits C reported (refusals), each
-- name's bit in `bit` (the broker's: EPHD_REFUSE_<name>); l is the
-- tenant's limits.
function _M.budget_message(rung, refusals, bit, l)
    if rung.which then
        local hit = {}
        for _, name in ipairs(rung.bits) do
            if band(refusals, bit[name]) ~= 0 then
                hit[#hit + 1] = rung.which[name](l)
            end
        end
        return rung.prefix .. table.concat(hit, "; ")
    end
    if rung.too_small and band(refusals, bit.QUEUE_TOO_SMALL) ~= 0 then
        return rung.too_small
    end
    if rung.crowded and band(refusals, bit.QUEUE_CROWDED) ~= 0 then
        return rung.crowded
    end
    return rung.message
end

-- The checks over state st, by rung. Each returns nothing to pass, or
-- message, headers, code to refuse (code defaults to the rung's).
local function checks(st)
    local holder, call, reject = st.holder, st.call, st.reject
    local switch, tenant_of, unvouched = st.switch, st.tenant, st.unvouched
    local seen, gated, require_grant = st.seen, st.gated, st.require_grant
    local limits, take, clock = st.limits, st.take, st.clock
    local foreign, forwarded, not_json = st.foreign, st.forwarded,
                                         st.not_json
    local default_after = st.retry_after_s
    local allows, check, push = access.allows, contract.check, contract.push
    local admission = contract.admission
    local over_rate = rate.over_rate

    -- What policy hooks see, made when the first hook that runs needs it:
    -- a table of its own per request, since a hook may keep it, and none
    -- at all while the policy defines neither paused nor authenticate.
    local function hook_request(ctx)
        local request = ctx.request
        if not request then
            request = contract.request(ctx.route.name, seen(ctx.req))
            ctx.request = request
        end
        return request
    end

    local function failed(hook, why)
        reject(hook, why)
        return HOOK_FAILED, nil, "ephemeral_unavailable"
    end

    local c = {}

    function c.paused(ctx)
        if not ctx.family then return end
        local reason, after = switch()
        if reason then
            return reason, retry_after(after or default_after)
        end
        if not holder.active.hooks.paused then return end
        local ok, wait, why = call("paused", hook_request(ctx))
        if not ok then return HOOK_FAILED, nil, "ephemeral_unavailable" end
        local bad = check.paused(wait, why)
        if bad then return failed("paused", bad) end
        if wait == nil then return end
        return why or _M.PAUSED, retry_after(ceil(wait))
    end

    -- A request a browser marks as another origin's is refused first
    -- here, after the kill switch and before identity: a page's forgery
    -- says nothing about who sent it. The route's access level is
    -- checked here too, once the identity is established.
    function c.authenticate(ctx)
        if foreign then
            local why = foreign(ctx.req)
            if why then return why, nil, "forbidden" end
        end
        if ctx.forwarded then
            local tenant, why, code = forwarded(ctx)
            if not tenant then return why, nil, code end
            ctx.tenant, ctx.level = tenant, ctx.route.level
            return
        end
        local tenant, why = tenant_of(ctx.req)
        if not tenant then return why or _M.NO_TENANT, nil, "unauthorized" end
        local level = unvouched()
        if holder.active.hooks.authenticate then
            local request = hook_request(ctx)
            request.tenant = tenant
            local ok, who, reason = call("authenticate", request)
            if not ok then
                return HOOK_FAILED, nil, "ephemeral_unavailable"
            end
            local bad = check.authenticate(who, reason)
            if bad then return failed("authenticate", bad) end
            if type(who) == "string" then
                return reason or _M.REFUSED, nil, who
            elseif who then
                tenant, level = who.tenant:lower(), who.level
            end
        end
        -- Established before the level is checked, so a refusal for the
        -- level names who was refused (ephd.requestlog).
        ctx.tenant = tenant
        ctx.level = level
        local route = ctx.route
        if not allows(level, route.level) then
            return _M.no_access(route, level), nil, "forbidden"
        end
    end

    -- One table and one call per request, only for a policy that has
    -- the hook (compile leaves the rung out otherwise). A relayed request
    -- was admitted at its edge.
    function c.admit(ctx)
        if not ctx.family or ctx.forwarded then return end
        local ok, code, message, after = call("admit", admission(
            ctx.route.name, ctx.tenant, ctx.level, ctx.queue or nil,
            ctx.partition or nil, ctx.group or nil, ctx.messages or nil,
            ctx.bytes or nil))
        if not ok then return HOOK_FAILED, nil, "ephemeral_unavailable" end
        local bad = check.admit(code, message, after)
        if bad then return failed("admit", bad) end
        if code == nil then return end
        return message or _M.REFUSED,
               code == "rate_limited" and retry_after(after or 1) or nil,
               code
    end

    function c.grant(ctx)
        if ctx.family and not ctx.forwarded
           and gated(ctx.tenant, require_grant) then
            return _M.NOT_GRANTED
        end
    end

    -- The shape is the broker's (the same for any policy): a state
    -- without a reader of bodies leaves it to its caller.
    if not_json then
        function c.shape(ctx)
            if ctx.route.method == "POST" then
                local why = not_json(ctx.req)
                if why then return why end
            end
            return ctx.handler.parse(ctx)
        end
    end

    -- The tenant's limits are asked for only here, past the grant and the
    -- shape, so a request refused earlier leaves no state behind it:
    -- tenant ids are the client's to choose.
    function c.rate(ctx)
        if not ctx.family then return end
        local l = limits(ctx.tenant)
        if not l then return HOOK_FAILED, nil, "ephemeral_unavailable" end
        ctx.limits = l
        local cost = ctx.messages
        if not cost or ctx.forwarded then return end
        if not holder.active.messages_cost then
            local ok
            ok, cost = call("cost", push(ctx.tenant, ctx.queue or nil,
                                         ctx.partition or nil, cost,
                                         ctx.bytes))
            if not ok then
                return HOOK_FAILED, nil, "ephemeral_unavailable"
            end
            local bad = check.cost(cost)
            if bad then return failed("cost", bad) end
        end
        local taken, wait = take(ctx.tenant, cost, l.rate, l.burst,
                                 tonumber(clock()))
        if not taken then
            return over_rate(l.rate, cost, l.burst), retry_after(wait)
        end
        ctx.taken = cost
    end

    return c
end

-- ORDER's checks over state st compiled into one straight function, each
-- check a constant upvalue: a request is one trace through known calls.
-- A loop over ORDER made the JIT trace each rung as a side trace of the
-- loop (its call a different function each turn), and a chain of
-- closures left a guard per call: 1,300 and 450 instructions a push more
-- (callgrind). refused(ctx, code, message, headers, rung) answers the
-- first refusal; committed(ctx) runs once every check has passed; run
-- returns what they return. hooks: the policy's hooks the ladder is for;
-- a rung of a hook it lacks (admit) is left out, so a policy without the
-- hook pays nothing for it, not even a test.
function _M.compile(st, refused, committed, hooks)
    local check = checks(st)
    local head, body = {}, {}
    for i, rung in ipairs(_M.ORDER) do
        if rung.rung and check[rung.rung]
           and not (rung.hook and not hooks[rung.hook]) then
            head[#head + 1] = ("local check_%d = check[%q]\n")
                              :format(i, rung.rung)
            body[#body + 1] = ("message, headers, code = check_%d(ctx)\n"
                .. "if message then return refused(ctx, code or "
                .. "order[%d].code, message, headers, order[%d].rung) end\n")
                :format(i, i, i)
        end
    end
    local source = "local order, check, refused, committed = ...\n"
        .. table.concat(head) .. "return function(ctx)\n"
        .. "local message, headers, code\n" .. table.concat(body)
        .. "return committed(ctx)\nend\n"
    return assert(load(source, "=ephd.rungs.run"))(_M.ORDER, check, refused,
                                                   committed)
end

return _M
