-- The database comes and goes; the hot path never notices.
local cjson = require("cjson")
local daemon = require("e2e.daemon")

local function configure(d, queue)
    return d:request("POST", "/api/v1/ephemeral/configure",
                     '{"queue":' .. cjson.encode(queue)
                     .. ',"options":{"maxLength":100}}')
end

-- One push, one pop, one ack; asserts each worked.
local function cycle(d, i)
    assert.equals(201, d:push("hot", { tostring(i) }).status)
    local m = d:pop("queue=hot&group=g").json.messages[1]
    assert.equals(i, m.payload)
    assert.equals("acked",
                  d:ack("hot", "g", { { m.id } }).json.results[1].outcome)
end

describe("with the database stopped mid-run", function()
    it("serves push, pop and ack, refuses configure, then heals", function()
        daemon.forget_declarations()
        local d = daemon.start({ db = true })
        -- busted keeps one finally per test: the last one given. Whatever
        -- happens, the next spec has a database.
        finally(function()
            daemon.pg_start()
            d:stop()
        end)
        assert.equals(201, configure(d, "before").status)
        daemon.pg_stop()
        local refused = 0
        for i = 1, 50 do
            cycle(d, i)
            local res = configure(d, "during")
            if res.status == 503 then
                assert.refused_with("ephemeral_unavailable", res)
                refused = refused + 1
            end
        end
        assert.is_true(refused > 0)
        local ready = d:request("GET", "/ready")
        assert.equals(200, ready.status) -- the hot path still serves
        assert.equals("unavailable", ready.json.database)
        assert.refused_with("ephemeral_unavailable",
                            d:request("DELETE", "/api/v1/ephemeral/queue/x"))
        daemon.pg_start()
        local healed, t0 = false, daemon.now()
        local i = 50
        while daemon.now() - t0 < 10 do
            i = i + 1
            cycle(d, i)
            if configure(d, "after").status == 201 then
                healed = true
                break
            end
            daemon.sleep(0.1)
        end
        assert.is_true(healed, "configure did not heal")
        assert.equals("connected", d:request("GET", "/ready").json.database)
        assert.truthy(d:read_log():find("event=database_restored", 1, true))
        d:stop()
    end)
end)

describe("booting with an unreachable database", function()
    it("serves implicit queues and says so", function()
        local d = daemon.start({
            db = "postgresql:///postgres?host=/nonexistent-socket-dir" })
        finally(function() d:stop() end)
        cycle(d, 1)
        assert.refused_with("ephemeral_unavailable", configure(d, "q"))
        assert.truthy(d:read_log():find("serving implicit queues", 1, true))
        d:stop()
    end)
end)

describe("the hot path", function()
    it("opens no database connection and runs no statement", function()
        daemon.forget_declarations()
        daemon.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        local d = daemon.start({ db = true,
                                 env = { QUEEN_EPHEMERAL_REFRESH_S = "3600" } })
        finally(function() d:stop() end)
        local function backends()
            return daemon.sql("SELECT count(*) || ':' || "
                              .. "coalesce(min(backend_start)::text, '') "
                              .. "FROM pg_stat_activity "
                              .. "WHERE application_name = 'ephd'")
        end
        local before = backends()
        assert.truthy(before:find("^1:"), before)
        daemon.sql("SELECT pg_stat_statements_reset()")
        for i = 1, 200 do cycle(d, i) end
        local c = d:connect()
        for _ = 1, 50 do
            c:request("GET", "/api/v1/ephemeral/queues")
            c:request("GET", "/api/v1/ephemeral/queues/hot/depth")
            c:request("GET", "/metrics")
        end
        c:close()
        -- The cell's heartbeat runs on its own timer, whatever the
        -- traffic: not the hot path's.
        local ours = daemon.sql(
            "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "
            .. "JOIN pg_roles r ON r.oid = s.userid WHERE s.query NOT ILIKE "
            .. "'%pg_stat%' AND s.query NOT ILIKE '%pg_roles%' "
            .. "AND s.query NOT ILIKE '%ephemeral_members%'")
        assert.equals("0", ours)
        assert.equals(before, backends())
        d:stop()
    end)
end)
