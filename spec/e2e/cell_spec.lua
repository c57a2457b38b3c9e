-- The cell's membership (docs/cell.md): brokers sharing one PostgreSQL
-- see each other, a broker that stops leaves at once, one that dies drops
-- out past its TTL, and a broker without a database is a cell of one.
local daemon = require("e2e.daemon")
local helper = require("helper")

-- Short enough that a death is seen within a spec's patience.
local TTL = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "300" }

local function member(view, id)
    for _, m in ipairs(view.members) do
        if m.id == id then return m end
    end
end

-- Polls d's view until check(view) holds, for up to `seconds`; returns
-- the last view, which the caller asserts on.
local function await(d, seconds, check)
    local t0, view = daemon.now(), d:cell()
    while not check(view) and daemon.now() - t0 < seconds do
        daemon.sleep(0.05)
        view = d:cell()
    end
    return view
end

local function live(view, id)
    local m = member(view, id)
    return m ~= nil and m.live
end

local function push_partitions(d, n)
    for i = 1, n do
        assert.equals(201, d:push("rooms", { "1" }, "room-" .. i).status)
    end
end


describe("the cell", function()
    it("is this broker alone without a database", function()
        local d = daemon.start()
        finally(function() d:stop() end)
        push_partitions(d, 3)
        local view = d:cell()
        assert.is_false(view.database)
        assert.is_true(view.fresh)
        assert.equals(1, view.live)
        assert.equals(1, #view.members)
        local me = view.members[1]
        assert.equals(view.self.id, me.id)
        assert.truthy(me.id:find("^%x+$") and #me.id == 16, me.id)
        assert.equals("http://127.0.0.1:" .. d.port, me.address)
        assert.truthy(me.epoch:find("^%x+$") and #me.epoch == 8, me.epoch)
        assert.is_true(me.live)
        assert.same({ held = 3, owned = 3 }, view.partitions)
    end)

    it("sees its brokers on one database within a couple of seconds, "
       .. "each owning its share of the partitions", function()
        local a = daemon.start({ db = true, env = TTL })
        local b
        -- busted keeps one finally per test: the last one given.
        finally(function()
            a:stop()
            if b then b:stop() end
        end)
        b = daemon.start({ db = true, env = TTL })
        local ida, idb = a:cell().self.id, b:cell().self.id
        assert.are_not.equal(ida, idb)
        local va = await(a, 5, function(v) return live(v, idb) end)
        local vb = await(b, 5, function(v) return live(v, ida) end)
        assert.is_true(live(va, idb), "a does not see b")
        assert.is_true(live(vb, ida), "b does not see a")
        assert.equals("http://127.0.0.1:" .. b.port, member(va, idb).address)
        assert.equals(b:cell().self.epoch, member(va, idb).epoch)
        assert.equals(300, member(va, idb).ttlMs)
        assert.is_true(va.fresh and va.database)
        -- Both hold the same partitions; placement gives each to exactly
        -- one of them, and both agree on which. (A broker an earlier spec
        -- killed may still be live for its TTL: wait until it is not.)
        local function just_us(v)
            return v.live == 2 and live(v, ida) and live(v, idb)
        end
        assert.is_true(just_us(await(a, 10, just_us)))
        assert.is_true(just_us(await(b, 10, just_us)))
        push_partitions(a, 40)
        push_partitions(b, 40)
        local pa, pb = a:cell().partitions, b:cell().partitions
        assert.equals(40, pa.held)
        assert.equals(40, pb.held)
        assert.equals(40, pa.owned + pb.owned)
        assert.is_true(pa.owned > 0 and pb.owned > 0)
    end)

    it("forgets a broker that stops cleanly at once: its row is gone",
       function()
        local a = daemon.start({ db = true, env = TTL })
        local b
        finally(function()
            a:stop()
            if b then b:stop() end
        end)
        b = daemon.start({ db = true })
        local idb = b:cell().self.id
        assert.is_true(live(await(a, 5, function(v) return live(v, idb) end),
                            idb))
        b:stop()
        assert.equals("0", daemon.sql("SELECT count(*) FROM "
                                      .. "queen.ephemeral_members WHERE id = '"
                                      .. idb .. "'"))
        -- b's TTL is 4 s: a forgets it well before that.
        local view = await(a, 3, function(v) return member(v, idb) == nil end)
        assert.is_nil(member(view, idb))
        assert.truthy(a:read_log():find("event=member_left id=" .. idb
                                        .. " [^\n]* reason=gone", 1))
    end)

    it("drops a broker killed -9 from the live members past its TTL",
       function()
        local a = daemon.start({ db = true, env = TTL })
        local b
        finally(function()
            a:stop()
            if b then b:stop() end
        end)
        b = daemon.start({ db = true, env = TTL })
        local idb = b:cell().self.id
        assert.is_true(live(await(a, 5, function(v) return live(v, idb) end),
                            idb))
        os.execute("kill -KILL " .. b.pid)
        b.stopped = true
        os.remove(b.log)
        local view = await(a, 5, function(v) return not live(v, idb) end)
        assert.is_false(live(view, idb))
        -- Not live, yet listed: its row stays until it is collected.
        assert.is_false(member(view, idb).live)
        assert.is_true(member(view, idb).seenMsAgo > 300)
        assert.truthy(a:read_log():find("event=member_left id=" .. idb
                                        .. " [^\n]* reason=unseen", 1))
        daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                   .. idb .. "'")
    end)

    it("replaces a crashed broker's row at once when its address returns",
       function()
        local a = daemon.start({ db = true, env = TTL })
        local b, c
        finally(function()
            a:stop()
            if b then b:stop() end
            if c then c:stop() end
        end)
        b = daemon.start({ db = true }) -- a TTL of 4 s
        local idb = b:cell().self.id
        assert.is_true(live(await(a, 5, function(v) return live(v, idb) end),
                            idb))
        os.execute("kill -KILL " .. b.pid)
        b.stopped = true
        os.remove(b.log)
        -- Its successor at the same address (a restart, as an orchestrator
        -- would do it) takes the row over: a forgets b long before its TTL.
        c = daemon.start({ db = true, args = {
            "--advertise http://127.0.0.1:" .. b.port } })
        local t0 = daemon.now()
        local view = await(a, 3, function(v) return member(v, idb) == nil end)
        assert.is_nil(member(view, idb))
        assert.is_true(daemon.now() - t0 < 3.5)
        assert.is_true(live(view, c:cell().self.id))
    end)

    it("keeps its last view, marked stale, while the database is away",
       function()
        local a = daemon.start({ db = true, env = TTL })
        finally(function()
            daemon.pg_start()
            a:stop()
        end)
        local id = a:cell().self.id
        assert.is_true(await(a, 5, function(v) return v.fresh end).fresh)
        daemon.pg_stop()
        local view = await(a, 5, function(v) return not v.fresh end)
        assert.is_false(view.fresh)
        assert.equals(id, view.self.id)
        assert.is_true(live(view, id))
        daemon.pg_start()
        assert.is_true(await(a, 10, function(v) return v.fresh end).fresh)
        assert.truthy(a:read_log():find("event=cell_view_stale", 1, true))
    end)
end)

describe("the cell's flags and knobs", function()
    local ephd = helper.build .. "/ephd"

    it("refuses to advertise every address when a cell is possible",
       function()
        local out, rc = helper.run(ephd .. " --listen 0.0.0.0:1 --database-url "
                            .. "postgresql:///x")
        assert.is_not.equals(0, rc)
        assert.truthy(out:find("--advertise", 1, true), out)
    end)

    it("stops at boot on an --advertise it could not dial", function()
        for _, bad in ipairs({ "127.0.0.1:1", "https://a:1", "http://a",
                               "http://a:0", "http://a:1/x",
                               "http://0.0.0.0:1", "http://::1:1",
                               "http://u@a:1" }) do
            local out, rc = helper.run(ephd .. " --listen 127.0.0.1:1 --advertise "
                                .. bad)
            assert.is_not.equals(0, rc, bad)
            assert.truthy(out:find("--advertise", 1, true), out)
        end
    end)

    it("stops at boot on a cell token too short to be a secret, "
       .. "without echoing it", function()
        local out, rc = helper.run("QUEEN_EPHEMERAL_CELL_TOKEN=short " .. ephd
                            .. " --listen 127.0.0.1:1")
        assert.is_not.equals(0, rc)
        assert.truthy(out:find("QUEEN_EPHEMERAL_CELL_TOKEN", 1, true), out)
        assert.falsy(out:find("short", 1, true), out)
    end)

    it("stops at boot on a TTL under 200 ms", function()
        local out, rc = helper.run("QUEEN_EPHEMERAL_MEMBER_TTL_MS=199 " .. ephd
                            .. " --listen 127.0.0.1:1")
        assert.is_not.equals(0, rc)
        assert.truthy(out:find("QUEEN_EPHEMERAL_MEMBER_TTL_MS", 1, true), out)
    end)

    it("advertises what it is told, and says only whether it has a token",
       function()
        local d = daemon.start({
            args = { "--advertise http://broker-7.internal:9000" },
            env = { QUEEN_EPHEMERAL_CELL_TOKEN = "a-secret-of-the-cell" },
        })
        finally(function() d:stop() end)
        assert.equals("http://broker-7.internal:9000", d:cell().self.address)
        local log = d:read_log()
        assert.truthy(log:find("name=QUEEN_EPHEMERAL_CELL_TOKEN "
                               .. "value=configured", 1, true))
        assert.falsy(log:find("a-secret-of-the-cell", 1, true))
    end)
end)
