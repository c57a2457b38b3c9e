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
end)
