-- The cell's admin verbs (docs/cell.md): each broker holds its own copy of
-- a queue, so reset and delete are applied where they land and fanned out
-- to the other live members, the answer counting what this broker dropped;
-- configure writes PostgreSQL, and every member applies the declaration at
-- its refresh.
local cjson = require("cjson")
local daemon = require("e2e.daemon")

local TOKEN = "fanout-spec-cell-token-0123456789"
local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400",
              QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
              QUEEN_EPHEMERAL_REFRESH_S = "1" }
local TENANT = "00000000-0000-0000-0000-000000000001"
local JSON = { ["Content-Type"] = "application/json" }

-- Two brokers that see each other, stopped by the test's end.
local function pair(env)
    local ds = daemon.start_cell(2, env or ENV)
    finally(function() daemon.stop_all(ds) end)
    daemon.await_cell(ds, 10)
    return ds[1], ds[2]
end

-- Messages of queue held by d, over its partitions.
local function pending(d, queue)
    local res = d:depth(queue)
    if res.status == 404 then return 0 end
    assert.equals(200, res.status, res.body)
    return res.json.pending
end

local function reset(d, queue, headers)
    return d:request("POST", "/api/v1/ephemeral/reset",
                     cjson.encode({ queue = queue }), headers or JSON)
end

local function fanned(d, route, outcome)
    return d:metric('queen_ephemeral_fanout_total{route="' .. route
                    .. '",outcome="' .. outcome .. '"} (%d+)')
end

-- Pushes to enough partitions, through a, that both brokers own some.
local function fill(a, queue)
    for i = 1, 20 do
        local res = a:push(queue, { "1", "2" }, "p-" .. i)
        assert.equals(201, res.status, res.body)
    end
end

describe("the cell's admin verbs", function()
    setup(daemon.forget_declarations)

    it("reset drops every broker's copy; the answer counts this one's",
       function()
        local a, b = pair()
        fill(a, "rooms")
        local here, there = pending(a, "rooms"), pending(b, "rooms")
        assert.equals(40, here + there)
        assert.is_true(here > 0 and there > 0, "both brokers own partitions")
        local res = reset(a, "rooms")
        assert.equals(200, res.status, res.body)
        assert.same({ queue = "rooms", dropped = here }, res.json)
        -- Answered once b had applied it.
        assert.equals(0, pending(a, "rooms"))
        assert.equals(0, pending(b, "rooms"))
        assert.equals(1, fanned(a, "reset", "applied"))
        -- The relay's latency histogram: every send to b (the pushes b
        -- owns, the reset, and the readiness probe that let b in the
        -- view) answered, each in one bucket.
        assert.equals(2, a:metric("\nqueen_ephemeral_members_live (%d+)"))
        local relayed = a:metric('queen_ephemeral_forwarded_total{route='
                                 .. '"push",outcome="answered"} (%d+)')
        assert.equals(relayed + 2, a:metric(
            'queen_ephemeral_relay_seconds_bucket{le="%+Inf"} (%d+)'))
        assert.equals(relayed + 2,
                      a:metric("queen_ephemeral_relay_seconds_count (%d+)"))
        -- b applied the marked request where it landed, and sent it no
        -- further.
        for _, outcome in ipairs({ "applied", "refused", "failed" }) do
            assert.equals(0, fanned(b, "reset", outcome))
        end
    end)

    it("delete removes the declaration and every broker's copy", function()
        local a, b = pair()
        local res = a:request("POST", "/api/v1/ephemeral/configure",
            '{"queue":"gone","options":{"maxLength":70}}', JSON)
        assert.equals(201, res.status, res.body)
        fill(a, "gone")
        assert.equals(40, pending(a, "gone") + pending(b, "gone"))
        res = a:request("DELETE", "/api/v1/ephemeral/queue/gone")
        assert.equals(200, res.status, res.body)
        assert.same({ queue = "gone", deleted = true, declared = true },
                    res.json)
        assert.equals(404, a:depth("gone").status)
        assert.equals(404, b:depth("gone").status)
        assert.equals(1, fanned(a, "delete", "applied"))
        assert.equals(0, fanned(b, "delete", "applied"))
        assert.equals("0", daemon.sql("SELECT count(*) FROM "
                                      .. "queen.ephemeral_queues WHERE "
                                      .. "queue = 'gone'"))
    end)

    it("configure reaches every member at its refresh", function()
        local a, b = pair()
        local res = a:request("POST", "/api/v1/ephemeral/configure",
            '{"queue":"declared-here","options":{"maxLength":7}}', JSON)
        assert.equals(201, res.status, res.body)
        local function declared(d)
            local list = d:request("GET", "/api/v1/ephemeral/queues").json
            for _, q in ipairs(list.queues) do
                if q.queue == "declared-here" then
                    return q.tier == "declared" and q.options.maxLength == 7
                end
            end
            return false
        end
        assert.is_true(declared(a))
        local t0 = daemon.now()
        while not declared(b) and daemon.now() - t0 < 5 do
            daemon.sleep(0.1)
        end
        assert.is_true(declared(b), "b did not apply the declaration")
    end)

    it("applies a marked reset only with the cell token", function()
        local _, b = pair()
        local forged = { ["Content-Type"] = "application/json",
                         ["X-Queen-Forward"] = "not-the-token-at-all "
                                               .. TENANT }
        local res = reset(b, "rooms", forged)
        assert.equals(401, res.status, res.body)
        assert.equals("unauthorized", res.json.code)
    end)

    it("a cell without a token resets only the broker asked", function()
        local a, b = pair({ QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400" })
        assert.equals(201, b:push("solo", { "1" }, "p").status)
        assert.equals(200, reset(a, "solo").status)
        assert.equals(1, pending(b, "solo"))
        assert.equals(0, fanned(a, "reset", "applied"))
    end)

    it("waits for a member that never answers only the relay's deadline",
       function()
        local env = { QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS = "400" }
        for k, v in pairs(ENV) do env[k] = v end
        local a = daemon.start({ db = true, env = env })
        local b = daemon.start({ db = true, env = env })
        -- One finally (busted keeps the last): b woken before both stop.
        finally(function()
            os.execute("kill -CONT " .. b.pid)
            daemon.stop_all({ a, b })
        end)
        daemon.await_cell({ a, b }, 10)
        fill(a, "frozen")
        -- Stopped, b's kernel still accepts connections: nobody answers.
        os.execute("kill -STOP " .. b.pid)
        local t0 = daemon.now()
        local res = reset(a, "frozen")
        local took = daemon.now() - t0
        assert.equals(200, res.status, res.body)
        assert.is_true(took >= 0.35 and took < 1.5, "took " .. took .. " s")
        assert.equals(1, fanned(a, "reset", "failed"))
    end)
end)
