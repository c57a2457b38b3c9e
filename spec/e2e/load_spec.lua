-- bench/load's generator against a real broker: a figure is only printed
-- from a correct run, so the generator itself must fail on a refusal and
-- on a message that does not come back. bench/run and CI rely on it.
local daemon = require("e2e.daemon")
local helper = require("helper")

local LOAD = helper.build .. "/bench/ephd-load"

local function load(d, args)
    local p = io.popen(("%s %s --port %d 2>&1; echo \"exit=$?\"")
                       :format(LOAD, args, d.port))
    local out = p:read("*a")
    p:close()
    local body, code = out:match("^(.*)exit=(%d+)%s*$")
    return body, tonumber(code)
end

describe("ephd-load", function()
    local d
    lazy_setup(function()
        d = daemon.start({ env = { QUEEN_EPHEMERAL_RATE = "0",
                                   QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "300" } })
    end)
    lazy_teardown(function() d:stop() end)

    it("reports a correct push and drain", function()
        local out, code = load(d, "push --count 200 --batch 10 --queue l1 "
                                  .. "--conns 4")
        assert.equals(0, code, out)
        assert.matches("mode=push count=200 messages=200 .* errors=0", out)
        out, code = load(d, "drain --count 200 --batch 50 --queue l1 "
                            .. "--conns 4")
        assert.equals(0, code, out)
        assert.matches("messages=200 .* errors=0", out)
    end)

    it("reports the server's CPU over the run, per message", function()
        -- Ten thousand push+pop cycles are tens of milliseconds of the
        -- broker's CPU: several of the ticks /proc counts.
        local out, code = load(d, ("pushpop --count 10000 --pid %d")
                                  :format(d.pid))
        assert.equals(0, code, out)
        local s = tonumber(out:match(" cpu_s=([%d.]+)"))
        local us = tonumber(out:match(" cpu_us=([%d.]+)"))
        assert.is_true(s and s > 0, out)
        assert.near(s * 1e6 / 10000, us, 0.01, out)
    end)

    it("reports its own CPU over the run, per message", function()
        local out, code = load(d, "pushpop --count 10000")
        assert.equals(0, code, out)
        local s = tonumber(out:match(" gen_cpu_s=([%d.]+)"))
        local us = tonumber(out:match(" gen_cpu_us=([%d.]+)"))
        assert.is_true(s and s > 0, out)
        -- gen_cpu_s is printed to the millisecond: 0.1 us a message here.
        assert.near(s * 1e6 / 10000, us, 0.1, out)
    end)

    -- bench/run's round-robin cell: a connection's pushes walk the
    -- partitions, one name a push (half relayed) or two (all its own).
    local function pending(queue)
        local names = {}
        for _, p in ipairs(d:depth(queue).json.partitions) do
            names[p.partition] = p.pending
        end
        return names
    end

    it("walks a connection's pushes over the partitions", function()
        local out, code = load(d, "push --count 6 --size 16 --conns 1 "
                                  .. "--queue w1 --partitions a,b,c,d --walk 1")
        assert.equals(0, code, out)
        assert.same({ a = 2, b = 2, c = 1, d = 1 }, pending("w1"))
        out, code = load(d, "push --count 6 --size 16 --conns 1 "
                            .. "--queue w2 --partitions a,b,c,d --walk 2")
        assert.equals(0, code, out)
        assert.same({ a = 3, c = 3 }, pending("w2"))
        out, code = load(d, "push --count 6 --size 16 --conns 1 "
                            .. "--queue w3 --partitions a,b,c,d")
        assert.equals(0, code, out)
        assert.same({ a = 6 }, pending("w3"))
    end)

    it("fails when a drain finds fewer messages than were pushed", function()
        assert.equals(0, select(2, load(d, "push --count 100 --batch 10 "
                                            .. "--queue l2 --conns 2")))
        local out, code = load(d, "drain --count 150 --batch 50 --queue l2 "
                                  .. "--conns 2")
        assert.equals(1, code, out)
        assert.matches("drained 100 messages, expected 150", out)
    end)

    it("fails when the broker refuses a push", function()
        -- 400 messages into a queue bounded at 300: 429 queue_full.
        local out, code = load(d, "push --count 400 --batch 100 --queue l3 "
                                  .. "--conns 1")
        assert.equals(1, code, out)
        assert.matches("unexpected reply 429", out)
    end)
end)
