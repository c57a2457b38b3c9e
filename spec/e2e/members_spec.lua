-- The cell's membership under stress (docs/cell.md, "Membership"): an
-- outage of the database is not the death of the members, and the rows of
-- queen.ephemeral_members are read as anybody may have written them.
local daemon = require("e2e.daemon")

local TOKEN = "members-spec-cell-token-0123456789"
local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400",
              QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN }

local function count_rows()
    return tonumber(daemon.sql("SELECT count(*) FROM queen.ephemeral_members"))
end

local function logged(ds, event)
    for _, d in ipairs(ds) do
        if d:read_log():find("event=" .. event, 1, true) then
            return d.port
        end
    end
end

-- A partition b owns: placement's, as b's status shows it.
local function owned_by(d, queue)
    for i = 1, 64 do
        local part = "p" .. i
        assert.equals(201, d:push(queue, { "1" }, part).status)
        if (d:held(queue)[part] or 0) > 0 then return part end
    end
    error("no partition of " .. queue .. " is held by :" .. d.port)
end

describe("the cell's membership", function()
    before_each(function()
        daemon.sql("DELETE FROM queen.ephemeral_members")
    end)

    it("outlives an outage of the database: no member judged dead, no row "
       .. "collected, no lease reset", function()
        local ds = daemon.start_cell(3, ENV)
        finally(function()
            daemon.pg_start()
            daemon.stop_all(ds)
        end)
        daemon.await_cell(ds, 10)
        -- A delivery taken before the outage, leased for long.
        local part = owned_by(ds[2], "outage")
        local res = ds[2]:pop("queue=outage&group=g&batch=1&partition=" .. part)
        assert.equals(200, res.status, res.body)
        local id = res.json.messages[1].id

        daemon.pg_stop()
        -- Past the TTL without a heartbeat, everywhere.
        daemon.wait_until("every view stale", function()
            for _, d in ipairs(ds) do
                if d:cell().fresh then return false end
            end
            return true
        end, 10)
        daemon.pg_start()
        -- The rows as a long outage leaves them: unseen for ten minutes,
        -- past the collection window (ten TTLs, at least a minute).
        daemon.sql("UPDATE queen.ephemeral_members "
                   .. "SET last_seen = now() - interval '10 minutes'")
        -- Every view, sampled until each is fresh and each member has
        -- beaten again (seen within its TTL), never drops a member.
        local function all_beating()
            for _, d in ipairs(ds) do
                local v = d:cell()
                assert.equals(3, v.live, "a view dropped a member")
                if not v.fresh then return false end
                for _, m in ipairs(v.members) do
                    if m.seenMsAgo > m.ttlMs then return false end
                end
            end
            return true
        end
        daemon.wait_until("every member beating again", all_beating, 20)
        -- A few more beats read by everyone (about elapsed time: a view
        -- would drop a member one TTL after the database came back).
        local t0 = daemon.now()
        while daemon.now() - t0 < 1.5 do
            all_beating()
            daemon.sleep(0.05)
        end
        assert.equals(3, count_rows())
        assert.is_nil(logged(ds, "member_left"))
        assert.is_nil(logged(ds, "partitions_wiped"))
        assert.is_nil(logged(ds, "partitions_handed_over"))
        res = ds[1]:ack("outage", "g", { { id, "completed" } })
        assert.equals(200, res.status, res.body)
        assert.equals("acked", res.json.results[1].outcome, res.body)
    end)

    it("reads the table as anybody may have written it: unsigned rows, "
       .. "foreign addresses and absurd values are no members, and stop "
       .. "nobody", function()
        local socket = require("socket")
        local fake = assert(socket.bind("127.0.0.1", 0))
        local _, port = fake:getsockname()
        fake:settimeout(0)
        local foreign = "http://127.0.0.1:" .. port
        local ds = daemon.start_cell(2, ENV)
        finally(function()
            daemon.stop_all(ds)
            fake:close()
            daemon.sql("DELETE FROM queen.ephemeral_members")
        end)
        daemon.await_cell(ds, 10)
        -- Not signed, or signed with another token: pointing the cell at a
        -- listener of somebody else's.
        daemon.member_row(nil, "f000000000000001", foreign, 7, 600000)
        daemon.member_row("another-cell-token-0123456789abcdef",
                          "f000000000000002", foreign, 7, 600000)
        -- Signed, but with a MAC over other values than the row's.
        daemon.sql("INSERT INTO queen.ephemeral_members (id, address, epoch, "
                   .. "ttl_ms, mac) VALUES ('f000000000000003', '" .. foreign
                   .. "', 8, 600000, '" .. daemon.member_mac(TOKEN,
                       "f000000000000003", foreign, 7, 600000) .. "')")
        -- Values no broker writes: they fail no heartbeat.
        daemon.member_row(nil, "f000000000000004", foreign, 7, 400,
                          "'infinity'")
        daemon.member_row(nil, "f000000000000005", foreign, 7, 400,
                          "'-infinity'")
        daemon.member_row(nil, "f000000000000006", foreign, -1, -5)
        daemon.member_row(nil, "not-an-id", foreign, 99999999999, 2147483647)
        -- A signed row seen in the future is not live for good: clamped to
        -- the database's now(), it ages out within its TTL.
        daemon.member_row(TOKEN, "f000000000000007", "http://127.0.0.1:1", 9,
                          400, "now() + interval '1 day'")
        for _, d in ipairs(ds) do
            d:await_log("event=member_row_ignored id=f000000000000003", 10)
            d:await_log("event=member_row_ignored id=not-an-id", 10)
        end
        daemon.wait_until("the future row aged out everywhere", function()
            for _, d in ipairs(ds) do
                for _, m in ipairs(d:cell().members) do
                    if m.id == "f000000000000007" and m.live then
                        return false
                    end
                end
            end
            return true
        end, 10)
        -- Never ready, it is never listed live: what says it was clamped
        -- is its row, at the next beat.
        daemon.wait_until("the future row clamped", function()
            return daemon.sql("SELECT last_seen <= now() FROM "
                              .. "queen.ephemeral_members WHERE id = "
                              .. "'f000000000000007'") == "t"
        end, 10)
        -- Every broker heartbeats on and serves, and the foreign rows are
        -- no members: never listed, never live, never sent to.
        daemon.wait_until("fresh views of two", function()
            for _, d in ipairs(ds) do
                local v = d:cell()
                if not v.fresh or v.live ~= 2 then return false end
                for _, m in ipairs(v.members) do
                    if m.address == foreign then
                        error("a foreign row is listed: " .. m.id)
                    end
                end
            end
            return true
        end, 10)
        for i = 1, 32 do
            assert.equals(201, ds[1 + i % 2]:push("rows", { "1" }, "p" .. i)
                                                 .status)
        end
        assert.is_nil(fake:accept())
        for _, d in ipairs(ds) do
            local log = d:read_log()
            local _, n = log:gsub("event=member_row_ignored id=f000000000000001",
                                  "")
            assert.equals(1, n, "logged once per row")
            assert.is_nil(log:find("event=cell_heartbeat_failed", 1, true))
        end
    end)

    it("places nothing on a member until its listener answers as it",
       function()
        local socket = require("socket")
        local fake = assert(socket.bind("127.0.0.1", 0))
        local _, port = fake:getsockname()
        local ds = daemon.start_cell(2, ENV)
        finally(function()
            daemon.stop_all(ds)
            fake:close()
            daemon.sql("DELETE FROM queen.ephemeral_members")
        end)
        daemon.await_cell(ds, 10)
        local function listed(id)
            for _, d in ipairs(ds) do
                local found
                for _, m in ipairs(d:cell().members) do
                    if m.id == id then found = m end
                end
                if not found then return false end
                assert.is_false(found.live, "placed on before it answered")
            end
            return true
        end
        local function serves(queue)
            for i = 1, 32 do
                local res = ds[1 + i % 2]:push(queue, { "1" }, "p" .. i)
                assert.equals(201, res.status, res.body)
            end
        end
        -- A row, signed, whose broker does not listen yet.
        daemon.member_row(TOKEN, "f0000000000000a1",
                          "http://127.0.0.1:" .. daemon.free_port(), 77, 600000)
        daemon.wait_until("the row read", function()
            return listed("f0000000000000a1")
        end)
        serves("unready")
        -- One whose address answers as another member.
        daemon.member_row(TOKEN, "f0000000000000a2",
                          "http://127.0.0.1:" .. port, 77, 600000)
        daemon.answer_ready(fake, "f0000000000000bb", 77,
                            function(n) return n >= 4 end)
        assert.is_true(listed("f0000000000000a2"))
        for _, d in ipairs(ds) do assert.equals(2, d:cell().live) end
        serves("imposter")
        -- Answering as itself, it joins.
        daemon.answer_ready(fake, "f0000000000000a2", 77, function()
            for _, d in ipairs(ds) do
                if d:cell().live ~= 3 then return false end
            end
            return true
        end)
    end)

    it("hears a stopping member leave at once: its partitions go to their "
       .. "new owners, and nothing it held is lost", function()
        local ds = daemon.start_cell(3, {
            QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN })
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, c = ds[1], ds[3]
        local idc = c:cell().self.id
        local pushed = 0
        local function push(part)
            local res = a:push("leaving", { "1" }, part)
            if res.status == 201 then pushed = pushed + 1 end
            return res
        end
        for i = 1, 24 do assert.equals(201, push("p" .. i).status) end
        local mine = {}
        for part, n in pairs(c:held("leaving")) do
            if n > 0 then mine[#mine + 1] = part end
        end
        assert.is_true(#mine > 0)
        -- While c stops, a sends its partitions' pushes on: never to a
        -- broker that no longer listens. (The survivors hear the notice a
        -- moment apart: in between, the new owner may not know it owns
        -- yet, and answers owner_moved, which a client retries.)
        os.execute("kill -TERM " .. c.pid)
        local i, moved = 0, 0
        while c:alive() do
            i = i + 1
            local res = push(mine[1 + i % #mine])
            if res.status == 503 and res.json.code == "owner_moved" then
                moved = moved + 1
            else
                assert.equals(201, res.status, res.body)
            end
        end
        c.stopped = true
        assert.is_true(i > 0)
        assert.is_true(moved <= 3, moved .. " owner_moved")
        assert.truthy(a:read_log():find("event=member_left id="
                                        .. idc .. " [^\n]* "
                                        .. "reason=leaving", 1), "no notice")
        local held = 0
        for _, d in ipairs({ ds[1], ds[2] }) do
            for _, n in pairs(d:held("leaving")) do held = held + n end
        end
        assert.equals(pushed, held)
    end)

    it("stops two members at once handing over only to the survivor",
       function()
        local ds = daemon.start_cell(3, ENV)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        local pushed = 0
        local function push(d, part)
            if d:push("pair", { "1", "2" }, part).status == 201 then
                pushed = pushed + 2
            end
        end
        for i = 1, 32 do push(ds[1 + i % 3], "p" .. i) end
        assert.equals(64, pushed)
        os.execute("kill -TERM " .. a.pid .. " " .. b.pid)
        -- Under traffic: c takes pushes for every partition meanwhile.
        local i = 0
        while a:alive() or b:alive() do
            i = i + 1
            push(c, "p" .. (1 + i % 32))
        end
        a.stopped, b.stopped = true, true
        daemon.wait_until("c alone", function() return c:cell().live == 1 end)
        local held = 0
        for _, n in pairs(c:held("pair")) do held = held + n end
        if os.getenv("MEMBERS_DEBUG") then
            for _, d in ipairs(ds) do
                for line in d:read_log():gmatch("[^\n]+") do
                    if not line:find("event=request", 1, true) then
                        print(d.port, line)
                    end
                end
            end
        end
        assert.equals(pushed, held)
    end)
end)

