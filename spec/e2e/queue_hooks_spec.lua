-- The per-queue hooks through real HTTP: admit refusing pushes by queue
-- name (examples/policies/tmp-queues), and queue_options giving implicit
-- queues their options by name (examples/policies/presence), once per
-- queue created, with a reload's answers for queues created after it.
local cjson = require("cjson")
local daemon = require("e2e.daemon")
local helper = require("helper")

local QUEUES = "/api/v1/ephemeral/queues"
local RELOAD = "/api/v1/system/policy/reload"
local EXAMPLES = helper.root .. "/examples/policies/"

local function write(dir, init)
    local f = assert(io.open(dir .. "/init.lua", "w"))
    f:write(init)
    f:close()
end

local function policy_dir(init)
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) == 0)
    write(dir, init)
    return dir
end

-- The listing's entry for queue, or nil.
local function listed(d, queue)
    for _, q in ipairs(d:request("GET", QUEUES).json.queues) do
        if q.queue == queue then return q end
    end
end

describe("admit", function()
    it("refuses pushes to tmp-* with the policy's code and words, takes "
       .. "no tokens for them, and serves everything else", function()
        local d = daemon.start({
            args = { "--policy-dir " .. EXAMPLES .. "tmp-queues" },
            env = { QUEEN_EPHEMERAL_RATE = "5",
                    QUEEN_EPHEMERAL_BURST = "5" } })
        finally(function() d:stop() end)
        for _ = 1, 4 do
            local res = d:push("tmp-1", { "1", "2", "3", "4", "5" })
            assert.refused_with("ephemeral_quota_exceeded", res)
            assert.equals(403, res.status)
            assert.equals("queues named tmp-* take no pushes on this broker",
                          res.json.error)
        end
        -- The whole burst is left for a push it admits.
        assert.equals(201, d:push("orders", { "1", "2", "3", "4", "5" })
                              .status)
        -- A pop of a tmp-* queue is the policy's to allow, and it does.
        assert.equals(200, d:pop("queue=tmp-1").status)
    end)

    it("answers 503 for a result the contract refuses, counted", function()
        local d = daemon.start({ args = { "--policy-dir " .. policy_dir(
            'return { name = "bad", version = 1, hooks = { admit = '
            .. 'function() return "gone" end } }') } })
        finally(function() d:stop() end)
        assert.refused_with("ephemeral_unavailable", d:push("q", { "1" }))
        d:await_log("hook=admit", 5)
        assert.equals(1, d:metric('queen_ephemeral_policy_hook_failures_total'
                                  .. '{hook="admit"} (%d+)'))
    end)
end)

describe("queue_options", function()
    it("gives a new presence-* queue maxLength 3 and ttlSeconds 30: the "
       .. "fourth push is queue_full, and the listing shows them",
       function()
        local d = daemon.start({
            args = { "--policy-dir " .. EXAMPLES .. "presence" } })
        finally(function() d:stop() end)
        for i = 1, 3 do
            assert.equals(201, d:push("presence-room1", { tostring(i) })
                                  .status)
        end
        local res = d:push("presence-room1", { "4" })
        assert.refused_with("queue_full", res)
        assert.equals(429, res.status)
        local q = assert(listed(d, "presence-room1"))
        assert.equals("implicit", q.tier)
        assert.equals(3, q.options.maxLength)
        assert.equals(30, q.options.ttlSeconds)
        -- A first push too large for the policy's bounds is refused whole
        -- and leaves no queue behind.
        assert.refused_with("queue_full",
                            d:push("presence-room2", { "1", "2", "3", "4" }))
        assert.is_nil(listed(d, "presence-room2"))
        -- A pop that creates one gets the same options.
        assert.equals(200, d:pop("queue=presence-room3").status)
        assert.equals(3, assert(listed(d, "presence-room3")).options.maxLength)
        -- Other names keep the broker's defaults.
        assert.equals(201, d:push("orders", { "1", "2", "3", "4" }).status)
        assert.equals(0, assert(listed(d, "orders")).options.ttlSeconds)
    end)

    it("is asked once per queue created, and a reload's answers hold for "
       .. "queues created after it", function()
        -- Each answer differs from the last: maxLength counts the calls.
        local counting = 'local n = 0 return { name = "n", version = %d, '
            .. 'hooks = { queue_options = function() n = n + 1 '
            .. 'return { maxLength = %d + n } end } }'
        local dir = policy_dir(counting:format(1, 100))
        local d = daemon.start({ args = { "--policy-dir " .. dir } })
        finally(function() d:stop() end)
        for _ = 1, 5 do assert.equals(201, d:push("a", { "1" }).status) end
        assert.equals(200, d:pop("queue=a&batch=2").status)
        assert.equals(201, d:push("b", { "1" }).status)
        assert.equals(101, listed(d, "a").options.maxLength)
        assert.equals(102, listed(d, "b").options.maxLength)
        write(dir, counting:format(2, 200))
        assert.equals(200, d:request("POST", RELOAD).status)
        assert.equals(201, d:push("a", { "1" }).status)
        assert.equals(201, d:push("c", { "1" }).status)
        assert.equals(101, listed(d, "a").options.maxLength)
        assert.equals(201, listed(d, "c").options.maxLength)
    end)

    it("creates the queue with the broker's defaults when the hook fails, "
       .. "logged and counted", function()
        local d = daemon.start({ args = { "--policy-dir " .. policy_dir(
            'return { name = "bad", version = 1, hooks = { queue_options = '
            .. 'function(_, q) if q == "boom" then error("no") end '
            .. 'return { maxLength = -1 } end } }') } })
        finally(function() d:stop() end)
        local defaults = d:request("GET", "/api/v1/system/ephemeral").json
        assert.equals(201, d:push("q", { "1" }).status)
        assert.truthy(d:await_log("hook=queue_options", 5)
                      :find("maxLength must be a non-negative integer", 1,
                            true))
        assert.equals(201, d:push("boom", { "1" }).status)
        assert.equals(2, d:metric('queen_ephemeral_policy_hook_failures_total'
                                  .. '{hook="queue_options"} (%d+)'))
        local q = listed(d, "q")
        assert.equals(0, q.options.ttlSeconds)
        assert.is_true(q.options.maxLength > 1, cjson.encode(defaults))
    end)

    it("gives way to a declaration's stored options", function()
        local d = daemon.start({ db = true,
            args = { "--policy-dir " .. EXAMPLES .. "presence" } })
        finally(function()
            d:stop()
            daemon.forget_declarations()
        end)
        assert.equals(201, d:request("POST", "/api/v1/ephemeral/configure",
            '{"queue":"presence-lobby","options":{"maxLength":5}}').status)
        assert.equals(201, d:push("presence-lobby",
                                  { "1", "2", "3", "4", "5" }).status)
        local q = listed(d, "presence-lobby")
        assert.equals("declared", q.tier)
        assert.same({ 5, 0 }, { q.options.maxLength, q.options.ttlSeconds })
    end)
end)
