-- The request context's parts (ephd.context) are each written by their
-- owner: the broker's requests, over every route the ladder decides and
-- every rung's refusal, are dispatched with the context behind a proxy
-- that records who writes each field, and each write is checked against
-- ephd.context.PARTS.
local ffi = require("ffi")
local helper = require("helper")
local testing = require("ephd.testing")

local DEFAULT = helper.root .. "/policies/default"
local EVERY_RUNG = helper.root .. "/spec/e2e/policies/every-rung"
local TENANT = "00000000-0000-0000-0000-000000000001"
local OTHER = "aaaaaaaa-0000-0000-0000-000000000002"

-- The module a function's source is: lua/ephd/handlers/push.lua is
-- ephd.handlers.push; a chunk loaded with a name (=ephd.rungs.run) is
-- that name.
local function module_of(source)
    local path = source:match("lua/(ephd/[%w_/]+)%.lua$")
    if path then return (path:gsub("/", ".")) end
    return (source:gsub("^[=@]", ""))
end

local function owns(owner, module)
    return module == owner or module:sub(1, #owner + 1) == owner .. "."
end

-- Wraps context ctx so that every write to it is recorded in `writes`
-- (field, value, writer); returns the wrapper, which reads and writes
-- through to ctx.
local function watch(ctx, writes)
    return setmetatable({}, {
        __index = ctx,
        __newindex = function(_, field, value)
            local info = debug.getinfo(2, "S")
            writes[#writes + 1] = { field = field, value = value,
                                    writer = module_of(info.source) }
            ctx[field] = value
        end,
    })
end

-- The writes that break PARTS: a field no part lists, or a value written
-- by anyone but its part's owner (owners overrides some, by part; the
-- dispatcher, which clears the others' parts, may write false).
local function violations(writes, owners)
    owners = owners or {}
    local part_of, dispatcher = {}, nil
    for _, part in ipairs(require("ephd.context").PARTS) do
        local owner = owners[part.name] or part.owner
        dispatcher = dispatcher or owner -- the first part: the router's
        for _, f in ipairs(part.fields) do
            part_of[f] = { name = part.name, owner = owner }
        end
    end
    local bad, seen = {}, {}
    for _, w in ipairs(writes) do
        local part = part_of[w.field]
        local line
        if not part then
            line = w.writer .. " writes " .. tostring(w.field)
                   .. ", which no part lists"
        elseif not owns(part.owner, w.writer)
               and not (w.writer == dispatcher and w.value == false) then
            line = w.writer .. " writes " .. part.name .. "." .. w.field
                   .. ", which is " .. part.owner .. "'s"
        end
        if line and not seen[line] then
            seen[line] = true
            bad[#bad + 1] = line
        end
    end
    table.sort(bad)
    return bad
end

describe("the request context", function()
    local host, writes, respond, answers, scan

    -- A broker of doubles under policy dir (with a request log, a shadow
    -- of the same policy, and tenancy headers when `all`): each C
    -- function the routes call answers as a broker would, enough for
    -- every rung and commit to run.
    local function broker(dir, all)
        respond, answers = helper.responder()
        scan = { queue = "q", partition = "Default", count = 1, bytes = 10 }
        local mark = "aaaaaaaa-0000-0000-0000-000000000009"
        local function ok() return 0 end
        local C
        local fns = {
            ephd_ffi_respond = respond,
            ephd_ffi_respond_as = ok,
            ephd_ffi_wall_time = function() return 1700000000 end,
            ephd_ffi_log_fields = ok,
            ephd_ffi_tenant_stats = function() return -3 end,
            ephd_ffi_push_scan = function(req)
                local s = req.op.scan
                if scan.fail then
                    s.message = scan.fail
                    return -1
                end
                s.queue.ptr, s.queue.len = scan.queue, #scan.queue
                s.partition.ptr = scan.partition
                s.partition.len = #scan.partition
                s.count, s.bytes, s.names_clean = scan.count, scan.bytes, 1
                return 0
            end,
            ephd_ffi_push_commit = function(req)
                if scan.full then
                    req.op.refusals = C.EPHD_REFUSE_QUEUE_FULL
                    return C.EPHD_E_REFUSED
                end
                return 0
            end,
            ephd_ffi_ack_scan = function(req)
                local s = req.op.scan
                s.queue.ptr, s.queue.len = scan.queue, #scan.queue
                s.has_group = 0
                return 0
            end,
            ephd_ffi_ack_commit = ok, ephd_ffi_pop = ok, ephd_ffi_queues = ok,
            ephd_ffi_configure = ok, ephd_ffi_reset = function() return 0 end,
            ephd_ffi_reset_fanout = ok, ephd_ffi_grant_set = ok,
            ephd_ffi_grant_delete = ok, ephd_ffi_policy_shadow = ok,
            ephd_ffi_policy_shadow_drop = ok, ephd_ffi_policy_reload = ok,
            ephd_ffi_policy_promote = ok, ephd_ffi_transfer_check = ok,
            ephd_ffi_transfer_commit = ok,
            ephd_ffi_delete = function() return C.EPHD_E_UNAVAILABLE end,
            ephd_ffi_depth = function() return C.EPHD_E_NOT_FOUND end,
            ephd_ffi_forward_tenant = function(_, slice)
                slice.ptr, slice.len = mark, #mark
                return 0
            end,
            ephd_ffi_cell_route = ok, ephd_ffi_metrics = ok,
        }
        C = helper.core_double(fns, { tenancy_header = all and 1 or 0,
                                      log_requests = all and 1 or 0,
                                      log_refusals = all and 1 or 0,
                                      rate = 3, burst = 3 })
        host = require("ephd.host")
        assert(host.init(dir, testing.read(dir), DEFAULT,
                         testing.read(DEFAULT)))
        if all then
            local policy = require("ephd.policy")
            require("ephd.shadow").start(assert(policy.load(
                dir, testing.read(dir), DEFAULT, testing.read(DEFAULT), {})),
                dir)
        end
        -- The one context, watched where dispatch and observe keep it.
        local i = 1
        while true do
            local name, ctx = debug.getupvalue(host.dispatch, i)
            assert(name, "ephd.dispatch keeps no upvalue ctx")
            if name == "ctx" then
                debug.setupvalue(host.dispatch, i, watch(ctx, writes))
                break
            end
            i = i + 1
        end
    end

    -- One request: route (a row's name), param, query, body, auth,
    -- forward (a member's mark).
    local function call(t)
        local route = helper.route(t.route)
        local path = route.path:gsub(":[%w_]+", t.param or "q")
        local req, anchor = helper.request({
            method = route.method, path = path, query = t.query,
            body = t.body, tenant = t.tenant or TENANT,
            authorization = t.auth or (route.class == "system"
                                       and "Bearer operator" or nil),
            content_type = route.method == "POST" and "application/json"
                           or nil })
        if t.forward then
            req.forward.ptr, req.forward.len = t.forward, #t.forward
        end
        helper.slot[0] = req
        host.dispatch()
        host.observe()
        return anchor
    end

    -- Every route the ladder decides, and a refusal at every rung.
    local function traffic()
        for _, t in ipairs({
            { route = "push", body = "{}" },
            { route = "push", body = "{}", queue = "tmp-1" },   -- admit
            { route = "push", body = "{}", full = true },       -- commit
            { route = "push", body = "{}", fail = "no push" },  -- shape
            { route = "push", body = "{}", count = 9 },         -- rate
            { route = "push", body = "{}", forward = "m" },     -- relayed
            { route = "push", body = "{}", auth = "Bearer paused" },
            { route = "push", body = "{}", auth = "Bearer refused" },
            { route = "push", body = "{}", auth = "Bearer reader" },
            { route = "push", body = "{}", tenant = "not-a-uuid" },
            { route = "pop", query = "queue=q&group=g" },
            { route = "ack", body = "{}" },
            { route = "handover", body = "{}" },
            { route = "handover", body = "{}", forward = "m" },
            { route = "configure", body = '{"queue":"q","options":{}}' },
            { route = "reset", body = '{"queue":"q"}' },
            { route = "delete" },                               -- its own
            { route = "depth", query = "group=g" },             -- refusal
            { route = "queues" },
            { route = "system_status" },
            { route = "system_switch", body = '{"enabled":true}' },
            { route = "policy_shadow" },
            { route = "policy_shadow_load", body = '{"dir":"/nowhere"}' },
            { route = "policy_shadow_delete" },
            { route = "policy_reload" },
            { route = "system_queues", query = "tenant=" .. OTHER },
            { route = "grants" },
            { route = "grant_set", body = '{"tenant":"' .. OTHER .. '"}' },
            { route = "grant_delete", param = OTHER },
            { route = "metering", query = "tenant=" .. OTHER },
            { route = "metrics" },
        }) do
            scan.queue, scan.count = t.queue or "q", t.count or 1
            scan.full, scan.fail = t.full, t.fail
            call(t)
        end
    end

    before_each(function() writes = {} end)

    it("is written part by part by each part's owner", function()
        broker(DEFAULT)
        traffic()
        assert.same({}, violations(writes))
        broker(EVERY_RUNG, true)
        traffic()
        assert.same({}, violations(writes))
        -- What ran: a field of every part written, and refusals from the
        -- rungs' checks and the commit.
        local fields, rungs = {}, {}
        for _, w in ipairs(writes) do
            if w.value then fields[w.field] = true end
            if w.field == "rung" and w.value then rungs[w.value] = true end
        end
        for _, f in ipairs({ "req", "forwarded", "request", "tenant",
                             "limits", "taken", "queue", "messages", "args",
                             "code" }) do
            assert.is_true(fields[f], f)
        end
        for _, r in ipairs({ "paused", "authenticate", "shape", "admit",
                             "rate", "commit" }) do
            assert.is_true(rungs[r], r)
        end
    end)

    it("names a module writing a part it does not own", function()
        broker(DEFAULT)
        -- A handler's parse deciding the tenant itself.
        local push = require("ephd.handlers.push")
        local parse = push.parse
        push.parse = assert(load([[
            local parse = ...
            return function(ctx)
                ctx.tenant = "someone else"
                return parse(ctx)
            end]], "@lua/ephd/handlers/push.lua"))(parse)
        call({ route = "push", body = "{}" })
        push.parse = parse
        assert.same({ "ephd.handlers.push writes decided.tenant, which is "
                      .. "ephd.rungs's" }, violations(writes))
    end)

    it("names a field no part lists", function()
        broker(DEFAULT)
        -- A handler's parse keeping a field of its own.
        local push = require("ephd.handlers.push")
        local parse = push.parse
        push.parse = assert(load([[
            local parse = ...
            return function(ctx)
                ctx.queues = "q"
                return parse(ctx)
            end]], "@lua/ephd/handlers/push.lua"))(parse)
        call({ route = "push", body = "{}" })
        push.parse = parse
        assert.same({ "ephd.handlers.push writes queues, which no part "
                      .. "lists" }, violations(writes))
    end)

    -- A judge's context (ephd.verdict: a shadow's, replay's) is its own
    -- dispatcher and parse; the rungs write its decided part alone.
    it("is written the same way in a judge's decision", function()
        helper.core_double()
        local verdict = require("ephd.verdict")
        local policy = require("ephd.policy")
        local p = assert(policy.load(EVERY_RUNG, testing.read(EVERY_RUNG),
                                     DEFAULT, testing.read(DEFAULT), {}))
        local judge = verdict.new(p, {
            grant = function() return nil end,
            defaults = function()
                return require("ephd.contract").defaults(2, 2, 10, 10)
            end,
        })
        local w = {}
        judge.ctx = watch(judge.ctx, w)
        local requests = {
            { route = "push", tenant = TENANT, queue = "q", messages = 1,
              bytes = 1 },
            { route = "push", tenant = TENANT, queue = "tmp-1",
              messages = 1, bytes = 1 },
            { route = "push", tenant = TENANT, queue = "q", messages = 5,
              bytes = 1 },
            { route = "push", tenant = TENANT, queue = "q", messages = 1,
              bytes = 1, authorization = "Bearer refused" },
            { route = "queues", tenant = "nobody" },
        }
        for i, r in ipairs(requests) do
            judge:decide(r, i)
            judge:undo()
        end
        assert.same({}, violations(w, { routed = "ephd.verdict",
                                        parsed = "ephd.verdict" }))
        local tenant = false
        for _, x in ipairs(w) do
            tenant = tenant or (x.field == "tenant" and x.value)
        end
        assert.equals(TENANT, tenant)
    end)
end)
