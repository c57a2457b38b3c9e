-- The two status reads, reset, delete and configure's shape checks.
local daemon = require("e2e.daemon")

local function entry(d, queue)
    for _, e in ipairs(d:request("GET", "/api/v1/ephemeral/queues").json.queues)
    do
        if e.queue == queue then return e end
    end
end

describe("status reads", function()
    local d
    lazy_setup(function()
        d = daemon.start({ env = { QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "3" } })
    end)
    lazy_teardown(function() d:stop() end)

    it("lists the tenant's queues with their gauges", function()
        d:pop("queue=s1&group=g1")
        d:push("s1", { '"ab"', '"cd"' }, "p1")
        d:push("s1", { '"e"' }, "p2")
        local list = d:request("GET", "/api/v1/ephemeral/queues").json
        local e = entry(d, "s1")
        assert.equals("implicit", e.tier)
        assert.equals(3, e.depth)
        assert.equals(11, e.bytes)
        assert.equals(2, e.partitions)
        assert.equals(1, e.groups)
        assert.same({ bounds = 0, ttl = 0, retry = 0 }, e.drops)
        assert.equals(3, e.options.maxLength)
        assert.equals("reject", e.options.policy)
        assert.equals(#list.queues, list.count)
        assert.is_true(list.cellBytes >= 11)
    end)

    it("counts the pops parked on each queue, over its groups", function()
        local conns = {}
        finally(function() for _, c in ipairs(conns) do c:close() end end)
        for _, q in ipairs({ "group=a", "group=b", "partition=x" }) do
            local c = d:connect()
            c:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=s-park&"
                                 .. q .. "&wait=true&timeout=5000"))
            conns[#conns + 1] = c
        end
        d:await_parked(3)
        assert.equals(3, entry(d, "s-park").parked)
        conns[1]:close()
        d:await_parked(2)
        assert.equals(2, entry(d, "s-park").parked)
        d:push("s-park", { "1" }, "x")
        d:await_parked(0)
        assert.equals(0, entry(d, "s-park").parked)
    end)

    it("lists a tenant's queues to the operator, paused or not", function()
        d:push("s-op", { "1" })
        d:request("POST", "/api/v1/system/ephemeral", '{"enabled":false}')
        finally(function()
            d:request("POST", "/api/v1/system/ephemeral", '{"enabled":true}')
        end)
        assert.refused_with("ephemeral_disabled",
                            d:request("GET", "/api/v1/ephemeral/queues"))
        local own = d:request("GET", "/api/v1/system/queues").json
        local named = d:request("GET", "/api/v1/system/queues?tenant="
                                .. "00000000-0000-0000-0000-000000000001").json
        assert.same(own, named)
        local found
        for _, e in ipairs(own.queues) do found = found or e.queue == "s-op" end
        assert.is_true(found)
        assert.equals(0, d:request("GET", "/api/v1/system/queues?tenant="
            .. "abababab-abab-abab-abab-abababababab").json.count)
        assert.refused_with("ephemeral_bad_request", d:request("GET",
            "/api/v1/system/queues?tenant=acme"))
    end)

    it("reads depth per partition and per group", function()
        d:pop("queue=s2&group=g")
        d:push("s2", { "1", "2" }, "p")
        d:pop("queue=s2&group=g&autoAck=true")
        local res = d:depth("s2")
        assert.equals(200, res.status)
        local j = res.json
        assert.equals("s2", j.queue)
        assert.equals("implicit", j.tier)
        assert.equals(1, j.pending)
        assert.equals(1, j.partitionsPending)
        assert.equals(1, j.bytes)
        assert.same({ { partition = "p", pending = 1, bytes = 1 } },
                    j.partitions)
        assert.same({ { group = "g", pending = 1, skipped = 0 } }, j.groups)
        local g = d:depth("s2", "g").json
        assert.equals("g", g.group)
        assert.equals(1, g.pending)
    end)

    -- Queen's pending: from the cursor to the tail plus redeliveries.
    it("counts no leased message as pending, and takes the worst group "
       .. "when none is named", function()
        d:pop("queue=s-lease&group=h")
        d:push("s-lease", { "1", "2", "3" }, "p")
        assert.equals(1, #d:pop("queue=s-lease&group=g").json.messages) -- leased
        assert.equals(2, d:depth("s-lease", "g").json.pending)
        local j = d:depth("s-lease").json
        assert.equals(3, j.pending) -- h's backlog, the worst
        assert.same({ { partition = "p", pending = 3, bytes = 3 } },
                    j.partitions)
        assert.same({ { group = "g", pending = 2, skipped = 0 },
                      { group = "h", pending = 3, skipped = 0 } }, j.groups)
        -- A group never seen would start at the heads.
        assert.equals(3, d:depth("s-lease", "new").json.pending)
    end)

    it("lists the shared cursor as __QUEUE_MODE__ and reaches it by that "
       .. "name", function()
        d:push("s-shared", { "1", "2" })
        assert.equals(1, #d:pop("queue=s-shared").json.messages) -- leased
        local j = d:depth("s-shared").json
        assert.equals(1, j.pending)
        assert.same({ { group = "__QUEUE_MODE__", pending = 1, skipped = 0 } },
                    j.groups)
        assert.equals(1, entry(d, "s-shared").groups)
        local got = d:pop("queue=s-shared&group=__QUEUE_MODE__").json.messages
        assert.equals(2, got[1].payload)
        assert.equals(0, d:depth("s-shared", "__QUEUE_MODE__").json.pending)
        assert.equals("__QUEUE_MODE__",
                      d:depth("s-shared", "__QUEUE_MODE__").json.group)
        -- Acked under either name: the same cursor.
        local ack = d:ack("s-shared", "__QUEUE_MODE__",
                          { { got[1].id, "completed" } })
        assert.truthy(ack.body:find('"acked"', 1, true), ack.body)
        assert.equals(1, entry(d, "s-shared").groups)
    end)

    it("answers 404 ephemeral_queue_not_found for an unknown queue",
       function()
        assert.refused_with("ephemeral_queue_not_found", d:depth("nope"))
    end)

    it("refuses a bad name on the depth path", function()
        assert.refused_with("ephemeral_bad_request", d:depth("a%01"))
        assert.refused_with("ephemeral_bad_request", d:depth("a%G1"))
    end)

    -- Only an unknown queue is the depth read's 404; an SDK reads any
    -- other 404 as a broker without these routes.
    it("answers 400 for an empty or many-segment name in a path", function()
        for _, c in ipairs({
            { "GET", "/api/v1/ephemeral/queues//depth", "queue must not be empty" },
            { "GET", "/api/v1/ephemeral/queues/a/b/depth",
              "queue must be one path segment (a / in a name is %2F)" },
            { "DELETE", "/api/v1/ephemeral/queue/", "queue must not be empty" },
            { "DELETE", "/api/v1/ephemeral/queue/a/b",
              "queue must be one path segment (a / in a name is %2F)" },
        }) do
            local res = d:request(c[1], c[2])
            assert.refused_with("ephemeral_bad_request", res)
            assert.equals(c[3], res.json.error)
        end
        -- A '/' in a name is %2F, and reaches its queue.
        d:push("a/b", { "1" })
        assert.equals(1, d:depth("a%2Fb").json.pending)
        assert.is_true(d:request("DELETE", "/api/v1/ephemeral/queue/a%2Fb")
                       .json.deleted)
    end)

    it("keeps other queues out of a queue's depth", function()
        d:push("s3", { "1" })
        d:push("s4", { "1", "2" })
        assert.equals(1, d:depth("s3").json.pending)
    end)
end)

describe("reset and delete", function()
    local d
    lazy_setup(function() d = daemon.start() end)
    lazy_teardown(function() d:stop() end)

    it("reset reports what it dropped and keeps the queue", function()
        d:push("r1", { "1", "2", "3" })
        local m = d:pop("queue=r1&group=g").json.messages[1]
        local res = d:request("POST", "/api/v1/ephemeral/reset",
                              '{"queue":"r1"}')
        assert.equals(200, res.status)
        assert.same({ queue = "r1", dropped = 3 }, res.json)
        assert.equals(0, d:depth("r1").json.pending)
        assert.equals("unknown",
                      d:ack("r1", "g", { { m.id } }).json.results[1].outcome)
        d:push("r1", { "4" })
        assert.equals(4, d:pop("queue=r1&group=g").json.messages[1].payload)
    end)

    it("reset of a queue that is not there drops 0", function()
        local res = d:request("POST", "/api/v1/ephemeral/reset",
                              '{"queue":"none"}')
        assert.same({ queue = "none", dropped = 0 }, res.json)
    end)

    it("reset refuses a bad body", function()
        for _, body in ipairs({ '{}', '{"queue":1}', '{"queue":"x","y":1}',
                                '[', '"x"' }) do
            assert.refused_with("ephemeral_bad_request",
                d:request("POST", "/api/v1/ephemeral/reset", body))
        end
    end)

    it("delete answers deleted true, then false, never 404", function()
        d:push("d1", { "1" })
        local res = d:request("DELETE", "/api/v1/ephemeral/queue/d1")
        assert.equals(200, res.status)
        assert.same({ queue = "d1", deleted = true, declared = false },
                    res.json)
        res = d:request("DELETE", "/api/v1/ephemeral/queue/d1")
        assert.same({ queue = "d1", deleted = false, declared = false },
                    res.json)
        assert.equals(404, d:depth("d1").status)
    end)

    it("delete answers a parked pop on the queue with an empty batch",
       function()
        local c = d:connect()
        c:send(daemon.format("GET",
            "/api/v1/ephemeral/pop?queue=d2&wait=true&timeout=10000"))
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
        d:request("DELETE", "/api/v1/ephemeral/queue/d2")
        local res = c:receive(2)
        assert.same({}, res.json.messages)
        c:close()
    end)

    it("delete decodes a percent-encoded name once", function()
        d:push("x/y", { "1" })
        local res = d:request("DELETE", "/api/v1/ephemeral/queue/x%2Fy")
        assert.is_true(res.json.deleted)
        assert.equals("x/y", res.json.queue)
    end)
end)

describe("configure", function()
    local d
    lazy_setup(function() d = daemon.start() end)
    lazy_teardown(function() d:stop() end)

    local function configure(body)
        return d:request("POST", "/api/v1/ephemeral/configure", body)
    end

    it("refuses an unknown option, naming the options that exist",
       function()
        local res = configure('{"queue":"c","options":{"ttlSecond":1}}')
        assert.refused_with("ephemeral_bad_request", res)
        for _, k in ipairs({ "maxBytes", "maxLength", "policy", "ttlSeconds",
                             "leaseSeconds", "retryLimit", "windowBuffer" }) do
            assert.truthy(res.json.error:find(k, 1, true), k)
        end
    end)

    it("refuses non-integer, negative and string bounds", function()
        for _, opts in ipairs({ '{"ttlSeconds":1.5}', '{"maxLength":-1}',
                                '{"maxBytes":"3"}', '{"policy":"drop"}',
                                '{"windowBuffer":{"ms":1}}',
                                '{"windowBuffer":{"ms":1,"count":2,"x":3}}' })
        do
            assert.refused_with("ephemeral_bad_request",
                configure('{"queue":"c","options":' .. opts .. '}'))
        end
    end)

    it("answers 503 for a valid declaration while no database is there",
       function()
        assert.refused_with("ephemeral_unavailable",
            configure('{"queue":"c","options":{"maxLength":10}}'))
    end)
end)

-- A list longer than a slice (1,000 queues) is streamed: chunked, a slice
-- a loop turn, each turn once the client has taken the last.
describe("a long queue list", function()
    local d
    lazy_setup(function()
        d = daemon.start({ env = {
            QUEEN_EPHEMERAL_MAX_UNWRITTEN_BYTES = "65536",
            QUEEN_EPHEMERAL_RATE = "0",
        } })
    end)
    lazy_teardown(function() d:stop() end)

    -- n queues named prefix..i, one message each, pushed 500 at a time on
    -- one connection.
    local function fill(prefix, n)
        local c = d:connect()
        for first = 1, n, 500 do
            local batch = {}
            for i = first, math.min(first + 499, n) do
                batch[#batch + 1] = daemon.format("POST",
                    "/api/v1/ephemeral/push", '{"queue":"' .. prefix .. i
                    .. '","messages":[{"payload":1}]}')
            end
            c:send(table.concat(batch))
            for _ = 1, #batch do assert.equals(201, c:receive().status) end
        end
        c:close()
    end

    local function names(list)
        local seen, n = {}, 0
        for _, e in ipairs(list.queues) do
            assert.is_nil(seen[e.queue], e.queue .. " is listed twice")
            seen[e.queue] = true
            n = n + 1
        end
        assert.equals(n, list.count)
        return seen, n
    end

    it("is streamed chunked, every queue once", function()
        fill("long-", 2500)
        local res = d:request("GET", "/api/v1/ephemeral/queues")
        assert.equals(200, res.status)
        assert.equals("chunked", res.headers["transfer-encoding"])
        assert.is_nil(res.headers["content-length"])
        local seen, n = names(res.json)
        assert.equals(2500, n)
        for i = 1, 2500 do assert.is_true(seen["long-" .. i]) end
        -- The connection stays usable after the last chunk.
        local c = d:connect()
        assert.equals(2500, c:request("GET", "/api/v1/ephemeral/queues")
                                .json.count)
        assert.equals(200, c:request("GET", "/health").status)
        c:close()
    end)

    it("outlives clients that leave while their list is being made",
       function()
        -- The last client waiting for a turn closed: the turn handle ran
        -- on an empty line and the broker crashed.
        for _ = 1, 3 do
            local c = d:connect()
            c:send(daemon.format("GET", "/api/v1/ephemeral/queues"))
            c.sock:shutdown("send")
            assert(c.sock:receive(1)) -- its list is being made
            c:close()
        end
        assert.equals(200, d:request("GET", "/health").status)
        assert.equals(2500, d:request("GET", "/api/v1/ephemeral/queues")
                                .json.count)
    end)

    it("answers HEAD with the headers alone and HTTP/1.0 delimited by the "
       .. "close", function()
        local c = d:connect()
        c:send("HEAD /api/v1/ephemeral/queues HTTP/1.1\r\nHost: t\r\n\r\n")
        local res = c:receive(10, true)
        assert.equals(200, res.status)
        assert.equals("chunked", res.headers["transfer-encoding"])
        assert.equals(200, c:request("GET", "/health").status)
        c:close()
        c = d:connect()
        c:send("GET /api/v1/ephemeral/queues HTTP/1.0\r\nHost: t\r\n\r\n")
        local raw = c.sock:receive("*a")
        c:close()
        local head, body = raw:match("^(.-)\r\n\r\n(.*)$")
        assert.truthy(head:find("Connection: close", 1, true))
        assert.is_nil(head:lower():find("transfer-encoding", 1, true))
        assert.is_true(require("cjson").decode(body).count >= 2500)
    end)

    it("holds a bounded amount for a client that does not read it", function()
        fill("wide-", 30000) -- with long-*, 8 MB of list
        local before = d:metric("queen_ephemeral_client_bytes (%d+)")
        local c = d:connect()
        c:send(daemon.format("GET", "/api/v1/ephemeral/queues"))
        d:await_settled()
        -- Whole, the answer would sit in its connection's buffers: 8 MB.
        -- Streamed, the connection holds its 64 KiB bound past what the
        -- kernel took, a slice, and the list's copy of the names (32,500
        -- short ones, counted as the connection's: under 1 MiB).
        local held = d:metric("queen_ephemeral_client_bytes (%d+)") - before
        assert.is_true(held < 3 * 1048576, "the connection holds " .. held)
        -- Queues deleted while it waits are left out, never half-written.
        for i = 1, 30000, 3 do
            assert.equals(200, d:request("DELETE", "/api/v1/ephemeral/queue/"
                                         .. "wide-" .. i).status)
        end
        local res = assert(c:receive(30))
        c:close()
        local _, n = names(res.json)
        assert.is_true(n <= 32500 and n >= 32500 - 10000, n)
        assert.equals(32500 - 10000, d:request("GET",
            "/api/v1/ephemeral/queues").json.count)
    end)

    it("is served while clients that never read hold lists of their own",
       function()
        -- Sixteen lists whose clients take nothing held the sixteen copies
        -- allowed at once, and every other long list waited for their idle
        -- timeout (300 s by default).
        local idle = {}
        for i = 1, 17 do
            idle[i] = d:connect()
            idle[i]:send(daemon.format("GET", "/api/v1/ephemeral/queues"))
        end
        finally(function()
            for _, c in ipairs(idle) do c:close() end
        end)
        d:await_settled()
        local c = d:connect()
        c:send(daemon.format("GET", "/api/v1/ephemeral/queues"))
        local res = c:receive(10)
        c:close()
        assert.is_truthy(res, "the list waited")
        assert.equals(32500 - 10000, res.json.count)
    end)
end)
