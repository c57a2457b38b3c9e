-- ack: the four outcomes, retries, lease expiry and restarts.
local daemon = require("e2e.daemon")

local function first(res)
    return res.json.messages[1]
end

describe("ack", function()
    local d
    lazy_setup(function()
        d = daemon.start({ env = {
            QUEEN_EPHEMERAL_RETRY_LIMIT = "3",
            QUEEN_EPHEMERAL_LEASE_S = "1",
        } })
    end)
    lazy_teardown(function() d:stop() end)

    it("answers acked for a held lease, then unknown", function()
        d:push("a1", { "1" })
        local m = first(d:pop("queue=a1&group=g"))
        assert.equals(0, m.attempts)
        local res = d:ack("a1", "g", { { m.id, "completed" } })
        assert.equals(200, res.status)
        assert.same({ { id = m.id, outcome = "acked" } }, res.json.results)
        res = d:ack("a1", "g", { { m.id } })
        assert.equals("unknown", res.json.results[1].outcome)
    end)

    it("redelivers a failed or retried message at once with attempts + 1",
       function()
        d:push("a2", { "1" })
        local m = first(d:pop("queue=a2&group=g"))
        assert.equals("redelivered",
                      d:ack("a2", "g", { { m.id, "failed" } })
                          .json.results[1].outcome)
        m = first(d:pop("queue=a2&group=g"))
        assert.equals(1, m.attempts)
        assert.equals("redelivered",
                      d:ack("a2", "g", { { m.id, "retry" } })
                          .json.results[1].outcome)
        assert.equals(2, first(d:pop("queue=a2&group=g")).attempts)
    end)

    it("drops a message after retryLimit deliveries and counts it",
       function()
        d:push("a3", { "1" })
        local outcomes = {}
        for i = 1, 3 do
            local m = first(d:pop("queue=a3&group=g"))
            assert.equals(i - 1, m.attempts)
            outcomes[i] = d:ack("a3", "g", { { m.id, "failed" } })
                .json.results[1].outcome
        end
        assert.same({ "redelivered", "redelivered", "acked" }, outcomes)
        assert.same({}, d:pop("queue=a3&group=g").json.messages)
        local q = d:request("GET", "/api/v1/ephemeral/queues").json
        for _, e in ipairs(q.queues) do
            if e.queue == "a3" then assert.equals(1, e.drops.retry) end
        end
    end)

    it("redelivers with attempts 1 when a lease expires", function()
        d:push("a4", { "1" })
        local m = first(d:pop("queue=a4&group=g"))
        assert.same({}, d:pop("queue=a4&group=g").json.messages)
        local res = d:pop("queue=a4&group=g&wait=true&timeout=3000")
        local again = first(res)
        assert.equals(1, again.attempts)
        -- The expired delivery's id no longer settles anything.
        assert.equals("unknown",
                      d:ack("a4", "g", { { m.id } }).json.results[1].outcome)
        assert.equals("acked",
                      d:ack("a4", "g", { { again.id } }).json.results[1].outcome)
    end)

    it("answers unknown for ids that do not parse and for another group",
       function()
        d:push("a5", { "1" })
        local m = first(d:pop("queue=a5&group=g"))
        local res = d:ack("a5", "h", { { m.id }, { "nonsense" } })
        assert.equals("unknown", res.json.results[1].outcome)
        assert.equals("unknown", res.json.results[2].outcome)
    end)

    it("settles queue-mode leases when no group is given", function()
        d:push("a6", { "1" })
        local m = first(d:pop("queue=a6"))
        assert.equals("acked",
                      d:ack("a6", nil, { { m.id } }).json.results[1].outcome)
    end)

    it("refuses a bad status or shape with 400", function()
        for _, body in ipairs({
            '{"queue":"a7","acks":[{"id":"e:1:p:1","status":"done"}]}',
            '{"queue":"a7","acks":[{"status":"completed"}]}',
            '{"queue":"a7","acks":[{"id":5}]}',
            '{"queue":"a7","acks":[{"id":"x","extra":1}]}',
            '{"queue":"a7","acks":{}}',
            '{"acks":[]}',
            '{"queue":"a7","acks":[',
        }) do
            assert.refused_with("ephemeral_bad_request",
                                d:request("POST", "/api/v1/ephemeral/ack",
                                          body))
        end
    end)

    it("accepts an error string and ignores it", function()
        d:push("a8", { "1" })
        local m = first(d:pop("queue=a8&group=g"))
        local res = d:request("POST", "/api/v1/ephemeral/ack",
            '{"queue":"a8","group":"g","acks":[{"id":"' .. m.id
            .. '","status":"completed","error":"ignored"}]}')
        assert.equals("acked", res.json.results[1].outcome)
    end)

    it("refuses more than 10,000 acks", function()
        local items = {}
        for i = 1, 10001 do items[i] = '{"id":"e:1:p:' .. i .. '"}' end
        local res = d:request("POST", "/api/v1/ephemeral/ack",
                              '{"queue":"a9","acks":[' .. table.concat(items, ",")
                              .. ']}')
        assert.refused_with("ephemeral_bad_request", res)
    end)
end)

describe("ack across a restart", function()
    it("answers stale for ids of the previous incarnation", function()
        local d = daemon.start()
        finally(function() d:stop() end)
        d:push("r", { "1" })
        local m = first(d:pop("queue=r&group=g"))
        d:stop()
        d = daemon.start()
        local res = d:ack("r", "g", { { m.id } })
        assert.equals("stale", res.json.results[1].outcome)
        -- Contents survive nothing.
        assert.equals(404, d:depth("r").status)
        d:stop()
    end)
end)
