-- The refusal order, literally, and for each adjacent pair of rungs a case
-- where both apply: the outer one must answer.
local bit = require("bit")
local cjson = require("cjson")
local helper = require("helper")
local testing = require("ephd.testing")

local DEFAULT = helper.root .. "/policies/default"

-- A policy that refuses identities whose credential is "bad".
local POLICY = 'return { name = "t", version = 1, hooks = { '
    .. 'authenticate = function(r) if r.authorization == "bad" then '
    .. 'return "unauthorized", "bad credential" end end } }'

describe("ephd.ladder", function()
    local ladder, C, answers, grants, killswitch, rate

    before_each(function()
        local respond
        respond, answers = helper.responder()
        C = helper.core_double({
            ephd_ffi_respond = respond,
            ephd_ffi_now_ms = function() return 1000ULL end,
        }, { rate = 10, burst = 10 })
        local policy = require("ephd.policy")
        require("ephd.hooks").active = assert(policy.load("/t",
            { init = POLICY }, DEFAULT, testing.read(DEFAULT), {}))
        ladder = require("ephd.ladder")
        grants = require("ephd.grants")
        killswitch = require("ephd.killswitch")
        rate = require("ephd.rate")
    end)

    it("states the refusal order, outermost first", function()
        local codes = {}
        for i, rung in ipairs(ladder.ORDER) do codes[i] = rung.code end
        assert.same({
            "ephemeral_disabled",       -- the kill switch
            "unauthorized",             -- a foreign browser origin
                                        -- (forbidden), identity, level
            "feature_gated",            -- the grant
            "ephemeral_bad_request",    -- shape
            "forbidden",                -- admit (or another code of
                                        -- contract.ADMIT_CODES)
            "rate_limited",             -- the tenant's message rate
            "queue_full",               -- the queue's own bounds
            "ephemeral_quota_exceeded", -- the tenant's bytes and queues
            "ephemeral_unavailable",    -- the cell's bytes
        }, codes)
    end)

    -- Runs one push-like request whose handler refuses as told.
    local function run(t)
        local req, anchor = helper.request({
            authorization = t.authorization or "" })
        local committed = false
        ladder.run({
            req = req, anchor = anchor, route = helper.route("push"),
            family = true,
            handler = {
                parse = function(ctx)
                    ctx.queue, ctx.partition = t.queue or "q", "Default"
                    ctx.messages, ctx.bytes = t.messages or 1, 1
                    return t.shape
                end,
                commit = function()
                    committed = true
                    return t.bits or 0
                end,
            },
        })
        local a = answers[#answers]
        return a and cjson.decode(a.body).code, a, committed
    end

    local T = "00000000-0000-0000-0000-000000000001"
    local function drain() assert.is_true(rate.take(T, 10, 10, 10, 1000)) end

    it("lets a request through every rung to its commit", function()
        local code, _, committed = run({})
        assert.is_nil(code)
        assert.is_true(committed)
    end)

    it("kill switch before identity", function()
        killswitch.set(true, 9, "maintenance", 0)
        local code, a = run({ authorization = "bad" })
        assert.equals("ephemeral_disabled", code)
        assert.equals("Retry-After: 9\r\n", a.headers)
        killswitch.set(false)
    end)

    it("identity before the grant", function()
        grants.replace({ [T] = { enabled = false } })
        assert.equals("unauthorized", (run({ authorization = "bad" })))
        grants.replace({})
    end)

    it("the grant before shape", function()
        grants.replace({ [T] = { enabled = false } })
        assert.equals("feature_gated", (run({ shape = "no queue" })))
        grants.replace({})
    end)

    it("shape before the rate", function()
        drain()
        assert.equals("ephemeral_bad_request", (run({ shape = "no queue" })))
        rate.reset()
    end)

    -- A policy with admit, put in force as the broker does: admit
    -- refuses pushes to tmp-*, and asks slow-* to wait 7 s.
    local ADMIT = 'return { name = "a", version = 1, hooks = { '
        .. 'admit = function(r) '
        .. 'if r.queue:find("^tmp%-") then return "ephemeral_quota_exceeded", '
        .. '"no tmp queues: " .. r.route .. " " .. r.level .. " " '
        .. '.. r.messages end '
        .. 'if r.queue:find("^slow%-") then return "rate_limited", nil, 7 end '
        .. 'if r.queue == "bad" then return "not_a_code" end end } }'
    local function admitting()
        local policy = require("ephd.policy")
        ladder.use(assert(policy.load("/a", { init = ADMIT }, DEFAULT,
                                      testing.read(DEFAULT), {})))
    end

    it("shape before admit", function()
        admitting()
        assert.equals("ephemeral_bad_request",
                      (run({ shape = "no queue", queue = "tmp-1" })))
    end)

    it("admit before the rate, and a push it refuses takes no tokens",
       function()
        admitting()
        for _ = 1, 3 do
            local code, a = run({ queue = "tmp-1", messages = 10 })
            assert.equals("ephemeral_quota_exceeded", code)
            assert.equals(403, a.status)
            assert.equals("no tmp queues: push admin 10",
                          cjson.decode(a.body).error)
        end
        -- The whole burst is still there.
        drain()
        assert.equals("ephemeral_quota_exceeded", (run({ queue = "tmp-1" })))
        rate.reset()
        local code, a = run({ queue = "slow-1" })
        assert.equals("rate_limited", code)
        assert.equals("Retry-After: 7\r\n", a.headers)
        assert.equals("refused by policy", cjson.decode(a.body).error)
        assert.is_true(select(3, run({ queue = "fine" })))
    end)

    it("answers 503 for an admit result the contract refuses", function()
        admitting()
        local hooks = require("ephd.hooks")
        local code, a = run({ queue = "bad" })
        assert.equals("ephemeral_unavailable", code)
        assert.equals(503, a.status)
        assert.equals(1, hooks.failures.admit)
    end)

    it("runs no admit rung for a policy without the hook", function()
        local hooks = require("ephd.hooks")
        ladder.use(hooks.active)
        -- Given one after it is in force, the ladder never calls it: the
        -- rung is absent, not a test per request.
        local called = false
        hooks.active.hooks.admit = function() called = true end
        assert.is_true(select(3, run({ queue = "tmp-1" })))
        assert.is_false(called)
    end)

    it("the rate before the queue's bounds", function()
        drain()
        local code, a, committed = run({ bits = C.EPHD_REFUSE_QUEUE_FULL })
        assert.equals("rate_limited", code)
        assert.equals("Retry-After: 1\r\n", a.headers)
        assert.is_false(committed)
        rate.reset()
    end)

    it("the queue's bounds before the tenant's allowance", function()
        assert.equals("queue_full", (run({ bits = bit.bor(
            C.EPHD_REFUSE_QUEUE_FULL, C.EPHD_REFUSE_TENANT_BYTES) })))
    end)

    it("says why dropOldest could not make room", function()
        local code, a = run({ bits = C.EPHD_REFUSE_QUEUE_CROWDED })
        assert.equals("queue_full", code)
        assert.matches("pushed partition only", cjson.decode(a.body).error)
    end)

    it("the tenant's allowance before the cell", function()
        assert.equals("ephemeral_quota_exceeded", (run({ bits = bit.bor(
            C.EPHD_REFUSE_TENANT_QUEUES, C.EPHD_REFUSE_CELL_BYTES) })))
        assert.equals("ephemeral_unavailable",
                      (run({ bits = C.EPHD_REFUSE_CELL_BYTES })))
    end)

    it("gives back the tokens of a push a later rung refused", function()
        run({ messages = 10, bits = C.EPHD_REFUSE_QUEUE_FULL })
        assert.is_true(rate.take(T, 10, 10, 10, 1000))
        rate.reset()
    end)

    it("treats bits it has no rung for as a programming error", function()
        assert.has_error(function() ladder.budget(0x40000000) end)
    end)
end)
