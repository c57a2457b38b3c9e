-- pop: FIFO, groups, partitions, batches, long polls and autoAck.
local cjson = require("cjson")
local daemon = require("e2e.daemon")

local function payloads(res)
    local out = {}
    for i, m in ipairs(res.json.messages) do out[i] = m.payload end
    return out
end

describe("pop", function()
    local d
    lazy_setup(function() d = daemon.start() end)
    lazy_teardown(function() d:stop() end)

    it("is FIFO per partition", function()
        local list = {}
        for i = 1, 50 do list[i] = tostring(i) end
        d:push("fifo", list, "p")
        local got = {}
        for _ = 1, 5 do
            local res = d:pop("queue=fifo&partition=p&batch=10&autoAck=true")
            for _, v in ipairs(payloads(res)) do got[#got + 1] = v end
        end
        for i = 1, 50 do assert.equals(i, got[i]) end
    end)

    it("answers the queue name and an empty array when there is nothing",
       function()
        local res = d:pop("queue=nothing")
        assert.equals(200, res.status)
        assert.equals('{"queue":"nothing","messages":[]}', res.body)
    end)

    it("gives every message to each of two groups", function()
        d:pop("queue=fan&group=a")
        d:pop("queue=fan&group=b")
        d:push("fan", { "1", "2", "3" })
        assert.same({ 1, 2, 3 }, payloads(d:pop("queue=fan&group=a&batch=10")))
        assert.same({ 1, 2, 3 }, payloads(d:pop("queue=fan&group=b&batch=10")))
    end)

    it("never gives one message to two consumers of a group", function()
        local list = {}
        for i = 1, 40 do list[i] = tostring(i) end
        d:push("share", list)
        local a, b = d:connect(), d:connect()
        local seen, count = {}, 0
        for _ = 1, 10 do
            for _, c in ipairs({ a, b }) do
                local res = c:request("GET",
                                      "/api/v1/ephemeral/pop?queue=share&group=w&batch=2")
                for _, m in ipairs(res.json.messages) do
                    assert.is_nil(seen[m.payload])
                    seen[m.payload] = true
                    count = count + 1
                end
            end
        end
        assert.equals(40, count)
        a:close()
        b:close()
    end)

    it("takes from every partition when none is named", function()
        d:push("allp", { "1" }, "x")
        d:push("allp", { "2" }, "y")
        local res = d:pop("queue=allp&batch=10")
        table.sort(res.json.messages, function(m, n)
            return m.payload < n.payload
        end)
        assert.same({ 1, 2 }, payloads(res))
        assert.equals("x", res.json.messages[1].partition)
        assert.equals("y", res.json.messages[2].partition)
    end)

    it("takes only from the named partition", function()
        d:push("onep", { "1" }, "x")
        d:push("onep", { "2" }, "y")
        assert.same({ 2 }, payloads(d:pop("queue=onep&partition=y&batch=10")))
    end)

    it("delivers at most batch messages, clamping batch to at least 1",
       function()
        d:push("batch", { "1", "2", "3" })
        assert.equals(1, #d:pop("queue=batch&group=g").json.messages)
        assert.equals(1, #d:pop("queue=batch&group=g&batch=0").json.messages)
        assert.equals(1, #d:pop("queue=batch&group=g&batch=99999")
                             .json.messages)
    end)

    -- Past 15 digits (or a double's range) they are still non-negative
    -- integers: clamped, to 10,000 and 300,000 ms.
    it("clamps batch and timeout of any length", function()
        d:push("long", { "1", "2", "3" })
        local res = d:pop("queue=long&autoAck=1&batch="
                          .. ("9"):rep(20) .. "&timeout=" .. ("9"):rep(400))
        assert.equals(200, res.status)
        assert.equals(3, #res.json.messages)
        local c = d:connect()
        c:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=long&wait=1"
                                    .. "&timeout=" .. ("9"):rep(20)))
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
        d:push("long", { '"late"' })
        assert.same({ "late" }, payloads(c:receive(5)))
        c:close()
    end)

    it("answers a parked wait=true pop with a push within milliseconds",
       function()
        local c = d:connect()
        c:send(daemon.format("GET",
            "/api/v1/ephemeral/pop?queue=park&wait=true&timeout=10000"))
        -- The pop is parked before the push is sent.
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
        local t0 = daemon.now()
        d:push("park", { '"ping"' })
        local res = c:receive(5)
        local took = daemon.now() - t0
        assert.same({ "ping" }, payloads(res))
        assert.is_true(took < 0.5, "took " .. took)
        c:close()
    end)

    it("answers a parked pop at its timeout with an empty array", function()
        local t0 = daemon.now()
        local res = d:pop("queue=quiet&wait=true&timeout=200")
        local took = daemon.now() - t0
        assert.same({}, res.json.messages)
        assert.is_true(took >= 0.19, "took " .. took)
    end)

    it("sends a timed-out pop's answer at once, not at the next event",
       function()
        -- The answer is made in a timer, outside the poll phase; it used to
        -- wait for the next poll to end, up to the 1 s housekeeping tick.
        -- Five in a row: about 0.5 s when answered at once, about 4 s when
        -- each waits for a tick.
        local t0 = daemon.now()
        for _ = 1, 5 do
            assert.same({}, d:pop("queue=quiet&wait=true&timeout=100")
                               .json.messages)
        end
        local took = daemon.now() - t0
        assert.is_true(took < 2.5, "took " .. took)
    end)

    -- A parked pop's arguments are its request's own (its operation):
    -- requests dispatched while it waits, of every kind, change nothing
    -- of what it answers with.
    it("answers each parked pop with its own arguments", function()
        local a, b = d:connect(), d:connect()
        a:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=own-a"
                             .. "&group=ga&batch=2&wait=true&timeout=10000"))
        b:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=own-b"
                             .. "&batch=3&wait=true&timeout=10000"))
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
        for i = 1, 5 do
            d:push("own-c", { tostring(i) }, "p" .. i)
            assert.equals(200, d:pop("queue=own-c&group=gc&batch=7").status)
            assert.equals(200, d:request("POST", "/api/v1/ephemeral/ack",
                '{"queue":"own-c","group":"gc","acks":[{"id":"e:1:p:1"}]}')
                .status)
        end
        d:push("own-b", { "1", "2", "3", "4" })
        d:push("own-a", { "5", "6", "7" })
        local ra, rb = a:receive(5), b:receive(5)
        assert.equals("own-a", ra.json.queue)
        assert.same({ 5, 6 }, payloads(ra))
        assert.equals("own-b", rb.json.queue)
        assert.same({ 1, 2, 3 }, payloads(rb))
        a:close()
        b:close()
    end)

    it("wakes a waiter on a named partition only for that partition",
       function()
        local c = d:connect()
        c:send(daemon.format("GET",
            "/api/v1/ephemeral/pop?queue=wp&partition=a&wait=true&timeout=400"))
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
        d:push("wp", { "1" }, "b")
        assert.same({}, c:receive(5).json.messages)
        c:close()
    end)

    it("with autoAck keeps no lease: nothing to ack, nothing redelivered",
       function()
        d:push("auto", { "1" })
        local res = d:pop("queue=auto&group=g&autoAck=true")
        local id = res.json.messages[1].id
        local ack = d:ack("auto", "g", { { id } })
        assert.equals("unknown", ack.json.results[1].outcome)
        assert.same({}, d:pop("queue=auto&group=g").json.messages)
    end)

    it("commits on delivery under commitOnDelivery or its old name autoAck, "
       .. "either true", function()
        for i, flags in ipairs({ "commitOnDelivery=true", "autoAck=true",
                                 "commitOnDelivery=yes&autoAck=no",
                                 "commitOnDelivery=0&autoAck=1" }) do
            local q = "cod-" .. i
            d:push(q, { "1" })
            local res = d:pop("queue=" .. q .. "&group=g&" .. flags)
            local id = res.json.messages[1].id
            assert.equals("unknown",
                          d:ack(q, "g", { { id } }).json.results[1].outcome,
                          flags)
            assert.same({}, d:pop("queue=" .. q .. "&group=g").json.messages)
        end
        d:push("cod-off", { "1" })
        local res = d:pop("queue=cod-off&group=g&commitOnDelivery=no"
                          .. "&autoAck=0")
        local id = res.json.messages[1].id
        assert.equals("acked",
                      d:ack("cod-off", "g", { { id } }).json.results[1].outcome)
    end)

    it("reads booleans as true, 1 or yes and false, 0 or no, and refuses "
       .. "anything else", function()
        local t0 = daemon.now()
        assert.same({}, d:pop("queue=yn&wait=yes&timeout=300").json.messages)
        assert.is_true(daemon.now() - t0 >= 0.25, "wait=yes did not wait")
        t0 = daemon.now()
        assert.same({}, d:pop("queue=yn&wait=no&timeout=5000").json.messages)
        assert.is_true(daemon.now() - t0 < 2, "wait=no waited")
        for _, v in ipairs({ "on", "YES", "True", "" }) do
            local res = d:pop("queue=yn&wait=" .. v)
            assert.refused_with("ephemeral_bad_request", res)
            assert.equals("wait must be true, 1, yes, false, 0 or no",
                          res.json.error)
        end
    end)

    it("ignores query parameters it does not know, on the pop and the "
       .. "status reads, as Queen does", function()
        d:push("unk", { "1" })
        assert.same({ 1 }, payloads(d:pop("queue=unk&sdkVersion=2.1"
                                          .. "&future=%zz&bare")))
        local res = d:request("GET", "/api/v1/ephemeral/queues/unk/depth"
                                     .. "?group=g&verbose=1")
        assert.equals(200, res.status, res.body)
        assert.equals("g", res.json.group)
        res = d:request("GET", "/api/v1/ephemeral/queues?limit=5")
        assert.equals(200, res.status, res.body)
    end)

    it("keeps the system routes strict about their parameters", function()
        for _, path in ipairs({ "/api/v1/system/queues?tennat=x",
                                "/api/v1/system/metering?limt=5" }) do
            local res = d:request("GET", path)
            assert.refused_with("ephemeral_bad_request", res)
            assert.truthy(res.json.error:find("unknown parameter", 1, true),
                          res.body)
        end
    end)

    it("reads an empty partition or group as absent, as Queen does",
       function()
        d:push("empty-names", { "1" }, "p1")
        d:push("empty-names", { "2" }, "p2")
        -- partition= pops the whole queue; group= is queue mode, whose
        -- shared cursor the depth read lists and a later pop continues.
        local res = d:pop("queue=empty-names&partition=&group=&batch=1")
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages)
        local depth = d:request("GET", "/api/v1/ephemeral/queues/empty-names"
                                       .. "/depth?group=")
        assert.equals(200, depth.status, depth.body)
        assert.equals(cjson.null, depth.json.group)
        assert.equals("__QUEUE_MODE__", depth.json.groups[1].group)
        assert.equals(1, #depth.json.groups)
        res = d:pop("queue=empty-names&batch=5")
        assert.equals(1, #res.json.messages)
        -- The ack's empty group is queue mode too.
        local ack = d:request("POST", "/api/v1/ephemeral/ack",
            '{"queue":"empty-names","group":"","acks":[{"id":"'
            .. res.json.messages[1].id .. '"}]}')
        assert.equals(200, ack.status, ack.body)
        assert.equals("acked", ack.json.results[1].outcome)
    end)

    it("refuses a bad query with 400 and changes nothing", function()
        for _, q in ipairs({
            "", "queue=", "queue=x&batch=abc", "queue=x&batch=-1",
            "queue=x&wait=maybe", "queue=x&timeout=1.5", "queue=x&autoAck=on",
            "queue=x&commitOnDelivery=TRUE", "queue=x&queue=y", "queue=x%ZZ",
            "queue=a%01b", "queue=x&group=" .. ("g"):rep(513),
        }) do
            assert.refused_with("ephemeral_bad_request", d:pop(q))
        end
        assert.equals(404, d:depth("x").status)
    end)

    it("decodes percent-encoded names once", function()
        d:push("a b/c", { "1" })
        assert.same({ 1 }, payloads(d:pop("queue=a%20b%2Fc&autoAck=1")))
        d:push("pct%41", { "2" })
        assert.same({ 2 }, payloads(d:pop("queue=pct%2541")))
    end)
    -- Ordinary use that crashed the broker: parked waiters pointed into the
    -- array of groups, which new groups grew (and moved) under them. Its own
    -- daemon, so that stopping cleanly is part of the answer.
    it("answers parked pops after new groups start popping", function()
        local dd = daemon.start()
        local function park(n)
            local conns = {}
            for i = 1, n do
                conns[i] = dd:connect()
                conns[i]:send(daemon.format("GET",
                    "/api/v1/ephemeral/pop?queue=grow&wait=true&timeout=10000"))
            end
            dd:await_parked(n)
            return conns
        end
        local function answered(conns)
            local got = {}
            for i, c in ipairs(conns) do
                local res = assert(c:receive(5))
                assert.equals(200, res.status)
                assert.equals(1, #res.json.messages)
                got[i] = res.json.messages[1].payload
                c:close()
            end
            table.sort(got)
            return got
        end
        local first = park(3)
        for i = 1, 40 do
            assert.equals(200, dd:pop("queue=grow&group=late" .. i).status)
        end
        dd:push("grow", { "1", "2", "3" })
        assert.same({ 1, 2, 3 }, answered(first))
        -- The same again: the gate must be whole after the first wake.
        local second = park(3)
        for i = 41, 60 do dd:pop("queue=grow&group=late" .. i) end
        dd:push("grow", { "4", "5", "6" })
        assert.same({ 4, 5, 6 }, answered(second))
        assert.equals(6, #dd:pop("queue=grow&group=late40&batch=10")
                          .json.messages)
        assert.is_true(dd:alive())
        dd:stop()
    end)
end)
