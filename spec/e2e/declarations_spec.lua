-- Declarations in PostgreSQL: configure, restarts, refresh, reset and
-- delete of declared queues, and the tiers.
local cjson = require("cjson")
local daemon = require("e2e.daemon")

local CONFIGURE = "/api/v1/ephemeral/configure"

local function entry(d, queue)
    local list = d:request("GET", "/api/v1/ephemeral/queues").json
    for _, e in ipairs(list.queues) do
        if e.queue == queue then return e end
    end
end

local function configure(d, queue, options)
    local body = '{"queue":' .. cjson.encode(queue)
                 .. (options and (',"options":' .. options) or "") .. '}'
    return d:request("POST", CONFIGURE, body)
end

local function stored(queue)
    return daemon.sql("SELECT options::text FROM queen.ephemeral_queues "
                      .. "WHERE queue = '" .. queue .. "'")
end

describe("declarations", function()
    local d
    before_each(function()
        daemon.forget_declarations()
        d = daemon.start({ db = true, env = {
            QUEEN_EPHEMERAL_MAX_BYTES = "100000000",
        } })
    end)
    after_each(function() d:stop() end)

    it("survive a restart, configured and empty", function()
        local opts = '{"maxBytes":1048576,"maxLength":1000,"policy":'
                     .. '"dropOldest","ttlSeconds":30,"leaseSeconds":15,'
                     .. '"retryLimit":3,"windowBuffer":{"ms":20,"count":50}}'
        local res = configure(d, "presence", opts)
        assert.equals(201, res.status)
        assert.equals("presence", res.json.queue)
        assert.same(cjson.decode(opts), res.json.options)
        local want = {
            maxBytes = 1048576, maxLength = 1000, policy = "dropOldest",
            ttlSeconds = 30, leaseSeconds = 15, retryLimit = 3,
            windowBuffer = { ms = 20, count = 50 },
        }
        assert.same(want, entry(d, "presence").options)
        assert.equals("declared", entry(d, "presence").tier)
        d:push("presence", { "1", "2" })
        d:push("loose", { "1" })
        d:stop()
        d = daemon.start({ db = true })
        local e = entry(d, "presence")
        assert.equals("declared", e.tier)
        assert.equals(0, e.depth)
        assert.same(want, e.options)
        -- An implicit queue does not come back.
        assert.is_nil(entry(d, "loose"))
    end)

    it("answer 201 with the stored declaration", function()
        local res = configure(d, "echo", '{ "retryLimit" : 2 }')
        assert.equals(201, res.status)
        assert.same({ queue = "echo", options = { retryLimit = 2 } }, res.json)
        assert.same({ retryLimit = 2 }, cjson.decode(stored("echo")))
    end)

    it("publish values in force, clamped, apart from what was stored",
       function()
        local res = configure(d, "clamped",
                              '{"maxBytes":900000000000,"leaseSeconds":0,'
                              .. '"maxLength":0}')
        assert.equals(201, res.status)
        assert.equals(900000000000, res.json.options.maxBytes)
        local o = entry(d, "clamped").options
        -- QUEEN_EPHEMERAL_QUEUE_MAX_BYTES: the default and the ceiling.
        assert.equals(16777216, o.maxBytes)
        -- 0 is the default for maxLength and leaseSeconds.
        assert.equals(30, o.leaseSeconds)
        assert.equals(10000, o.maxLength)
        -- Absent options take the broker's defaults; an off window is
        -- {ms: 0, count: 0}, as Queen publishes it.
        assert.equals("reject", o.policy)
        assert.equals(5, o.retryLimit)
        assert.same({ ms = 0, count = 0 }, o.windowBuffer)
        configure(d, "window", '{"windowBuffer":{"ms":90000,"count":5}}')
        assert.same({ ms = 60000, count = 5 },
                    entry(d, "window").options.windowBuffer)
        -- A window of 0 ms waits for nothing: off, and published as off.
        configure(d, "window", '{"windowBuffer":{"ms":0,"count":5}}')
        assert.same({ ms = 0, count = 0 },
                    entry(d, "window").options.windowBuffer)
    end)

    it("put at most QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH and _MAX_BYTES in "
       .. "force, whatever a configure says", function()
        configure(d, "big", '{"maxLength":10000000,"maxBytes":268435456}')
        local o = entry(d, "big").options
        assert.equals(10000, o.maxLength)
        assert.equals(16777216, o.maxBytes)
        -- The bound in force is the one refused at.
        configure(d, "big", '{"maxLength":10000000,"maxBytes":3}')
        assert.equals(201, d:push("big", { "1", "2", "3" }).status)
        assert.refused_with("queue_full", d:push("big", { "4" }))
        -- An operator who raises the knobs raises the ceiling with them.
        d:stop()
        d = daemon.start({ db = true, env = {
            QUEEN_EPHEMERAL_MAX_BYTES = "100000000",
            QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "20000",
        } })
        assert.equals(20000, entry(d, "big").options.maxLength)
    end)

    -- Non-negative integers past 2^53 (where lua-cjson loses digits, or
    -- reads infinity) are stored and echoed as sent, and clamped in force.
    it("store integers of any size as sent and clamp them in force",
       function()
        local huge = ("9"):rep(40)
        local opts = '{"maxBytes":18446744073709551616,"maxLength":' .. huge
                     .. ',"ttlSeconds":9007199254740993,"windowBuffer":'
                     .. '{"ms":' .. huge .. ',"count":' .. ("9"):rep(400)
                     .. '}}'
        local res = configure(d, "huge", opts)
        assert.equals(201, res.status)
        for _, digits in ipairs({ "18446744073709551616", huge,
                                  "9007199254740993", ("9"):rep(400) }) do
            assert.truthy(res.body:find(digits, 1, true), digits)
            assert.truthy(stored("huge"):find(digits, 1, true), digits)
        end
        local want = {
            maxBytes = 16777216, maxLength = 10000, policy = "reject",
            ttlSeconds = 604800, leaseSeconds = 30, retryLimit = 5,
            windowBuffer = { ms = 60000, count = 10000 },
        }
        assert.same(want, entry(d, "huge").options)
        -- The stored row checks again at the next boot.
        d:stop()
        d = daemon.start({ db = true, env = {
            QUEEN_EPHEMERAL_MAX_BYTES = "100000000",
        } })
        assert.equals("declared", entry(d, "huge").tier)
        assert.same(want, entry(d, "huge").options)
    end)

    it("replace the whole declaration on each configure", function()
        configure(d, "whole", '{"maxLength":7,"policy":"dropOldest"}')
        configure(d, "whole", '{"retryLimit":1}')
        local o = entry(d, "whole").options
        assert.equals(10000, o.maxLength)
        assert.equals("reject", o.policy)
        assert.equals(1, o.retryLimit)
    end)

    it("refuse a field or an option given twice, declaring nothing",
       function()
        for _, options in ipairs({
            '{"options":{"zzz":1},"options":{}}',
            '{"options":{"ttlSeconds":1.5,"ttlSeconds":1}}',
            '{"options":{"windowBuffer":{"ms":1,"ms":2,"count":3}}}',
        }) do
            local res = d:request("POST", "/api/v1/ephemeral/configure",
                '{"queue":"twice",' .. options:sub(2))
            assert.refused_with("ephemeral_bad_request", res)
            assert.truthy(res.json.error:find("more than once", 1, true)
                          or res.json.error:find("repeats", 1, true),
                          res.json.error)
        end
        assert.refused_with("ephemeral_bad_request", d:request("POST",
            "/api/v1/ephemeral/configure",
            '{"queue":"twice","queue":"other","options":{}}'))
        assert.equals("", stored("twice"))
        assert.equals("", stored("other"))
    end)

    it("take back the options a status read publishes", function()
        configure(d, "echo", '{"maxLength":7}')
        local published = entry(d, "echo").options
        assert.same({ ms = 0, count = 0 }, published.windowBuffer)
        local res = d:request("POST", "/api/v1/ephemeral/configure",
            require("cjson").encode({ queue = "echo", options = published }))
        assert.equals(201, res.status)
        assert.equals(7, entry(d, "echo").options.maxLength)
        -- And what earlier brokers published for an off window (null).
        published.windowBuffer = require("cjson").null
        res = d:request("POST", "/api/v1/ephemeral/configure",
            require("cjson").encode({ queue = "echo", options = published }))
        assert.equals(201, res.status)
    end)

    it("refuse an unknown option naming the valid keys, declaring nothing",
       function()
        local res = configure(d, "typo", '{"ttlSecond":5}')
        assert.refused_with("ephemeral_bad_request", res)
        for _, k in ipairs({ "maxBytes", "maxLength", "policy", "ttlSeconds",
                             "leaseSeconds", "retryLimit", "windowBuffer" }) do
            assert.truthy(res.json.error:find(k, 1, true), k)
        end
        assert.equals("", stored("typo"))
        assert.is_nil(entry(d, "typo"))
    end)

    it("refuse non-integers, negatives and strings, writing nothing",
       function()
        for _, opts in ipairs({ '{"ttlSeconds":1.5}', '{"maxLength":-1}',
                                '{"ttlSeconds":1.0}', '{"maxLength":1e2}',
                                '{"maxBytes":"3"}', '{"policy":"drop"}',
                                '{"windowBuffer":{"ms":1}}', '[]', '7' }) do
            assert.refused_with("ephemeral_bad_request",
                                configure(d, "shape", opts))
        end
        assert.equals("", stored("shape"))
    end)

    it("lowering a bound evicts nothing and refuses the next arrival",
       function()
        d:push("lower", { "1", "2", "3", "4", "5" })
        assert.equals(201, configure(d, "lower", '{"maxLength":3}').status)
        assert.equals(5, entry(d, "lower").depth)
        assert.refused_with("queue_full", d:push("lower", { "6" }))
    end)

    it("drop from the head under dropOldest, counting bounds and skipped",
       function()
        configure(d, "drop", '{"maxLength":3,"policy":"dropOldest"}')
        d:pop("queue=drop&group=slow")
        d:push("drop", { "1", "2", "3" })
        d:push("drop", { "4", "5" })
        local e = entry(d, "drop")
        assert.equals(3, e.depth)
        assert.equals(2, e.drops.bounds)
        local depth = d:depth("drop").json
        assert.same({ { group = "slow", pending = 3, skipped = 2 } },
                    depth.groups)
        local got = d:pop("queue=drop&group=slow&batch=10").json.messages
        assert.equals(3, got[1].payload)
    end)

    it("bound the queue over its partitions, not each partition",
       function()
        configure(d, "span", '{"maxLength":2}')
        assert.equals(201, d:push("span", { "1" }, "p1").status)
        assert.equals(201, d:push("span", { "2" }, "p2").status)
        assert.refused_with("queue_full", d:push("span", { "3" }, "p3"))
        local e = entry(d, "span")
        assert.equals(2, e.depth)
        assert.equals(2, e.partitions)
        configure(d, "span-bytes", '{"maxBytes":2}')
        assert.equals(201, d:push("span-bytes", { "1" }, "p1").status)
        assert.equals(201, d:push("span-bytes", { "2" }, "p2").status)
        assert.refused_with("queue_full", d:push("span-bytes", { "3" }, "p3"))
        assert.equals(2, entry(d, "span-bytes").bytes)
    end)

    it("evict under dropOldest from the pushed partition only", function()
        configure(d, "own", '{"maxLength":3,"policy":"dropOldest"}')
        d:pop("queue=own&group=g")
        d:push("own", { "1", "2" }, "p1")
        d:push("own", { "3" }, "p2")
        assert.equals(201, d:push("own", { "4" }, "p1").status)
        -- p2 holds one, and the others are p1's: refused whole.
        local res = d:push("own", { "5", "6" }, "p2")
        assert.refused_with("queue_full", res)
        assert.truthy(res.json.error:find("pushed partition only", 1, true),
                      res.json.error)
        local e = entry(d, "own")
        assert.equals(3, e.depth)
        assert.equals(1, e.drops.bounds)
        local got = d:pop("queue=own&group=g&partition=p1&batch=10").json
        assert.same({ 2, 4 }, { got.messages[1].payload,
                                got.messages[2].payload })
    end)

    it("refuse a push that cannot fit an empty ring, evicting nothing",
       function()
        configure(d, "nofit", '{"maxLength":2,"policy":"dropOldest"}')
        d:push("nofit", { "1" })
        local res = d:push("nofit", { "1", "2", "3" })
        assert.refused_with("queue_full", res)
        assert.truthy(res.json.error:find("cannot fit even in an empty queue",
                                          1, true), res.json.error)
        assert.equals(1, entry(d, "nofit").depth)
    end)

    it("drop messages older than ttlSeconds, counted as ttl", function()
        configure(d, "ttl", '{"ttlSeconds":1}')
        d:push("ttl", { "1", "2" })
        local t0 = daemon.now()
        daemon.wait_until("the ttl to drop both", function()
            return entry(d, "ttl").depth == 0
        end, 5)
        assert.is_true(daemon.now() - t0 >= 0.9, "dropped before its ttl")
        local e = entry(d, "ttl")
        assert.equals(0, e.depth)
        assert.equals(2, e.drops.ttl)
    end)

    it("keep a waiting pop parked when a lease expires on a message past "
       .. "its TTL", function()
        -- The lease expires a few milliseconds after the TTL has passed,
        -- before the housekeeping tick (within a second) drops the
        -- message: its redelivery wakes the pop, which must find nothing
        -- to deliver and wait on, not answer empty before its timeout.
        configure(d, "ttlwake", '{"ttlSeconds":1,"leaseSeconds":1}')
        d:push("ttlwake", { "1" })
        assert.equals(1, #d:pop("queue=ttlwake&group=g").json.messages)
        local t0 = daemon.now()
        local res = d:pop("queue=ttlwake&group=g&wait=true&timeout=3000")
        assert.same({}, res.json.messages)
        assert.is_true(daemon.now() - t0 >= 2.9, "answered after "
                       .. (daemon.now() - t0) .. " s, before its timeout")
        assert.equals(1, entry(d, "ttlwake").drops.ttl)
    end)

    it("use the declared lease and retry limit", function()
        configure(d, "lease", '{"leaseSeconds":1,"retryLimit":2}')
        d:push("lease", { "1" })
        local m = d:pop("queue=lease&group=g").json.messages[1]
        local again = d:pop("queue=lease&group=g&wait=true&timeout=3000")
            .json.messages[1]
        assert.equals(1, again.attempts)
        assert.equals("acked", d:ack("lease", "g", { { again.id, "failed" } })
                                   .json.results[1].outcome)
        assert.equals(1, entry(d, "lease").drops.retry)
        assert.truthy(m)
    end)

    it("let a waiting pop fatten its batch with windowBuffer", function()
        configure(d, "win", '{"windowBuffer":{"ms":500,"count":3}}')
        local c = d:connect()
        c:send(daemon.format("GET",
            "/api/v1/ephemeral/pop?queue=win&batch=10&wait=true&timeout=5000"))
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
        for i = 1, 3 do
            d:push("win", { tostring(i) })
            daemon.sleep(0.05) -- elapsed time: arriving within the window
        end
        local res = c:receive(5)
        assert.equals(3, #res.json.messages)
        c:close()
    end)

    it("answer a windowed pop with what it has when the window closes",
       function()
        configure(d, "win2", '{"windowBuffer":{"ms":300,"count":5}}')
        local c = d:connect()
        c:send(daemon.format("GET",
            "/api/v1/ephemeral/pop?queue=win2&batch=10&wait=true&timeout=5000"))
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
        local t0 = daemon.now()
        d:push("win2", { "1" })
        local res = c:receive(5)
        local took = daemon.now() - t0
        assert.equals(1, #res.json.messages)
        assert.is_true(took >= 0.25 and took < 2, "took " .. took)
        c:close()
    end)

    it("reset reports what it dropped and keeps the declaration", function()
        configure(d, "reset", '{"maxLength":50}')
        d:push("reset", { "1", "2", "3", "4" })
        local res = d:request("POST", "/api/v1/ephemeral/reset",
                              '{"queue":"reset"}')
        assert.same({ queue = "reset", dropped = 4 }, res.json)
        local e = entry(d, "reset")
        assert.equals("declared", e.tier)
        assert.equals(50, e.options.maxLength)
        assert.truthy(stored("reset"):find("50", 1, true))
    end)

    it("delete answers deleted and declared, then false and false",
       function()
        configure(d, "gone", '{"maxLength":5}')
        d:push("gone", { "1" })
        local res = d:request("DELETE", "/api/v1/ephemeral/queue/gone")
        assert.same({ queue = "gone", deleted = true, declared = true },
                    res.json)
        res = d:request("DELETE", "/api/v1/ephemeral/queue/gone")
        assert.same({ queue = "gone", deleted = false, declared = false },
                    res.json)
        assert.refused_with("ephemeral_queue_not_found", d:depth("gone"))
        assert.equals("", stored("gone"))
        d:push("imp", { "1" })
        res = d:request("DELETE", "/api/v1/ephemeral/queue/imp")
        assert.same({ queue = "imp", deleted = true, declared = false },
                    res.json)
    end)

    it("a declared, empty queue is deleted with deleted true", function()
        configure(d, "bare", "{}")
        local res = d:request("DELETE", "/api/v1/ephemeral/queue/bare")
        assert.same({ queue = "bare", deleted = true, declared = true },
                    res.json)
    end)

    -- PostgreSQL's text names the relation: it goes to the log, and the
    -- client is told only what failed.
    it("answer 500 when the write itself fails", function()
        daemon.sql("ALTER TABLE queen.ephemeral_queues RENAME TO moved")
        -- A failed assertion must not leave later specs without the table.
        finally(function()
            daemon.sql("ALTER TABLE IF EXISTS queen.moved RENAME TO "
                       .. "ephemeral_queues")
        end)
        local res = configure(d, "broken", '{"maxLength":5}')
        assert.refused_with("ephemeral_configure_failed", res)
        assert.same({ error = "the declaration could not be written",
                      code = "ephemeral_configure_failed" }, res.json)
        assert.is_nil(entry(d, "broken"))
        res = d:request("DELETE", "/api/v1/ephemeral/queue/broken")
        assert.refused_with("ephemeral_delete_failed", res)
        assert.same({ error = "the declaration could not be removed",
                      code = "ephemeral_delete_failed" }, res.json)
        local log = d:read_log()
        for _, event in ipairs({ "configure", "delete" }) do
            assert.truthy(log:find("event=ephemeral_" .. event .. "_failed "
                                   .. "[^\n]*queue=broken reason=[^\n]*"
                                   .. "ephemeral_queues"), event)
        end
        daemon.sql("ALTER TABLE queen.moved RENAME TO ephemeral_queues")
        assert.equals(201, configure(d, "broken", '{"maxLength":5}').status)
    end)

    -- A pop gathering its windowBuffer holds its place in line, so those
    -- parked behind it wait; when it leaves, the place goes to them.
    it("hand a windowed pop's place in line on when its client leaves",
       function()
        assert.equals(201, configure(d, "win",
            '{"windowBuffer":{"ms":5000,"count":10}}').status)
        local function park(batch)
            local c = d:connect()
            c:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=win"
                                 .. "&wait=true&timeout=4000&batch=" .. batch))
            return c
        end
        local gathering = park(10)
        d:await_parked(1)
        local behind = park(1)
        d:await_parked(2)
        assert.equals(201, d:push("win", { "1", "2" }).status)
        gathering:close()
        local t0 = daemon.now()
        local res = assert(behind:receive(5))
        behind:close()
        assert.equals(200, res.status)
        assert.equals(1, #res.json.messages, res.body)
        assert.is_true(daemon.now() - t0 < 1, "answered only at its timeout")
    end)
end)

describe("declarations refresh", function()
    it("picks up rows written and removed by someone else", function()
        daemon.forget_declarations()
        local d = daemon.start({ db = true,
                                 env = { QUEEN_EPHEMERAL_REFRESH_S = "1" } })
        finally(function() d:stop() end)
        d:push("other", { "1" })
        daemon.sql("INSERT INTO queen.ephemeral_queues (tenant_id, queue, "
                   .. "options) VALUES ('00000000-0000-0000-0000-000000000001',"
                   .. " 'other', '{\"maxLength\": 9}')")
        daemon.wait_until("the row to be loaded", function()
            return entry(d, "other").tier == "declared"
        end, 5)
        local e = entry(d, "other")
        assert.equals("declared", e.tier)
        assert.equals(9, e.options.maxLength)
        assert.equals(1, e.depth)
        daemon.sql("DELETE FROM queen.ephemeral_queues WHERE queue = 'other'")
        daemon.wait_until("the row's removal to be loaded", function()
            return entry(d, "other").tier == "implicit"
        end, 5)
        e = entry(d, "other")
        assert.equals("implicit", e.tier)
        assert.equals(10000, e.options.maxLength)
        d:stop()
    end)

    it("skips a stored row that no longer checks", function()
        daemon.forget_declarations()
        daemon.sql("INSERT INTO queen.ephemeral_queues (tenant_id, queue, "
                   .. "options) VALUES ('00000000-0000-0000-0000-000000000001',"
                   .. " 'handmade', '{\"maxLen\": 9}')")
        local d = daemon.start({ db = true })
        finally(function() d:stop() end)
        assert.is_nil(entry(d, "handmade"))
        assert.truthy(d:read_log():find("handmade", 1, true))
        d:stop()
        daemon.forget_declarations()
    end)
end)

describe("idle collection", function()
    local d
    before_each(function()
        daemon.forget_declarations()
        d = daemon.start({ db = true,
                           env = { QUEEN_EPHEMERAL_IMPLICIT_IDLE_S = "1" } })
    end)
    after_each(function() d:stop() end)

    local function await_collected(queue)
        daemon.wait_until(queue .. " to be collected", function()
            return entry(d, queue) == nil
        end, 5)
    end

    -- Made idle after the queue a test keeps: once it is collected, the
    -- collector has passed the kept one too.
    local function await_witness_collected()
        d:push("witness", { "1" })
        d:pop("queue=witness&autoAck=true")
        await_collected("witness")
    end

    it("collects an empty, unpolled implicit queue after its idle time",
       function()
        d:push("idle", { "1" })
        d:pop("queue=idle&autoAck=true")
        assert.truthy(entry(d, "idle"))
        await_collected("idle")
    end)

    it("keeps an implicit queue that still holds messages", function()
        d:push("full", { "1" })
        await_witness_collected()
        assert.equals(1, entry(d, "full").depth)
    end)

    it("does not collect a queue while a pop is parked on it", function()
        local c = d:connect()
        c:send(daemon.format("GET",
            "/api/v1/ephemeral/pop?queue=parked&wait=true&timeout=5000"))
        d:await_parked(1)
        await_witness_collected()
        assert.truthy(entry(d, "parked"))
        d:push("parked", { '"late"' })
        assert.equals("late", c:receive(5).json.messages[1].payload)
        c:close()
    end)

    it("never collects a declared queue", function()
        configure(d, "kept", "{}")
        await_witness_collected()
        assert.equals("declared", entry(d, "kept").tier)
    end)
end)
