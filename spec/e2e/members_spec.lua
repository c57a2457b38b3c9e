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
        assert.equals("t", daemon.sql("SELECT last_seen <= now() FROM "
                                      .. "queen.ephemeral_members WHERE id = "
                                      .. "'f000000000000007'"))
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
end)

