-- What a relayed request holds at its edge (docs/cell.md, "The relay"): its
-- body is kept once, counted in queen_ephemeral_client_bytes while held,
-- and what one peer has not answered is bounded in bytes
-- (QUEEN_EPHEMERAL_RELAY_MAX_PEER_BYTES): past it the edge answers 503
-- ephemeral_forward_failed at once. A slow owner costs the edge the bound,
-- not every push sent its way; past QUEEN_EPHEMERAL_MAX_CLIENT_BYTES the
-- relayed requests holding the most are evicted as any client is.
local daemon = require("e2e.daemon")

local MiB = 1024 * 1024
local TOKEN = "relay-budget-spec-token-0123456789"

-- d's resident memory, in bytes.
local function rss(d)
    for line in io.lines("/proc/" .. d.pid .. "/status") do
        local kb = line:match("^VmRSS:%s*(%d+) kB")
        if kb then return tonumber(kb) * 1024 end
    end
end

describe("the relay's bytes", function()
    it("are counted as the client's and bounded per peer when the owner "
       .. "is stopped", function()
        local ds = daemon.start_cell(2, {
            QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
            -- b stays in the view while stopped, and nothing times out.
            QUEEN_EPHEMERAL_MEMBER_TTL_MS = "60000",
            QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS = "60000",
            QUEEN_EPHEMERAL_MAX_BODY_BYTES = tostring(16 * MiB),
            QUEEN_EPHEMERAL_MAX_CLIENT_BYTES = tostring(192 * MiB),
            QUEEN_EPHEMERAL_RELAY_MAX_PEER_BYTES = tostring(40 * MiB),
        })
        local a, b = ds[1], ds[2]
        local frozen, conns = nil, {}
        finally(function()
            for _, c in ipairs(conns) do c:close() end
            if frozen then os.execute("kill -CONT " .. frozen) end
            daemon.stop_all(ds)
        end)
        daemon.await_cell(ds, 10)
        local part
        for i = 1, 60 do
            assert.equals(201, a:push("big", { "1" }, "p-" .. i).status)
            if b:held("big")["p-" .. i] then
                part = "p-" .. i
                break
            end
        end
        assert.truthy(part, "b owned none of 60 partitions")
        os.execute("kill -STOP " .. b.pid)
        frozen = b.pid
        local before = rss(a)
        local push = daemon.format("POST", "/api/v1/ephemeral/push",
            '{"queue":"big","partition":"' .. part
            .. '","messages":[{"payload":"' .. ("x"):rep(12 * MiB) .. '"}]}')
        for i = 1, 24 do
            conns[i] = a:connect()
            conns[i]:send(push)
        end
        -- Three fit the peer's 40 MiB and are held, counted as their
        -- clients' bytes; the other 21 were answered at once.
        local refused = 0
        for i = 4, 24 do
            local res = assert(conns[i]:receive(10))
            assert.equals(503, res.status, res.body)
            assert.equals("ephemeral_forward_failed", res.json.code)
            assert.equals("1", res.headers["retry-after"])
            assert.truthy(res.json.error:find("peer_bytes", 1, true), res.body)
            refused = refused + 1
        end
        assert.equals(21, refused)
        local held = a:metric("queen_ephemeral_client_bytes (%d+)")
        assert.is_true(held >= 36 * MiB and held <= 40 * MiB + MiB,
                       "client bytes " .. held)
        -- One copy each: the edge grew by what it holds, not twice that
        -- (nor by the 21 it refused, each read whole). Under the
        -- sanitizers resident size means nothing: freed memory sits in
        -- their quarantine.
        if not os.getenv("EPHD_SANITIZED") then
            local grown = rss(a) - before
            assert.is_true(grown < 36 * MiB + 64 * MiB,
                           ("grew %.1f MiB"):format(grown / MiB))
        end
        -- The three are still held, then answered by b once it is back
        -- (appended, or refused by the queue's own bounds).
        os.execute("kill -CONT " .. b.pid)
        frozen = nil
        for i = 1, 3 do
            local res = assert(conns[i]:receive(10))
            assert.is_true(res.status == 201 or res.json.code == "queue_full",
                           res.body)
        end
        daemon.wait_until("the held bytes to be given back", function()
            return a:metric("queen_ephemeral_client_bytes (%d+)") < MiB
        end, 5)
    end)
end)

describe("the relay's held bytes under the client budget", function()
    it("are evicted as a client's: the relayed pushes holding the most are "
       .. "closed, and the edge serves on", function()
        -- Seven relayed pushes of 3 MiB fit the budget with 1.5 MiB to
        -- spare, and so does the read of the next (its input buffer
        -- grows to 4 MiB as the six held give 18). A local push read in
        -- part (its buffer at 2 MiB) then passes the budget, and the
        -- largest connection, a held relay, is closed.
        local H = 3 * MiB
        local BUDGET = 7 * H + 3 * MiB / 2
        local ds = daemon.start_cell(2, {
            QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
            QUEEN_EPHEMERAL_MEMBER_TTL_MS = "60000",
            QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS = "60000",
            QUEEN_EPHEMERAL_MAX_BODY_BYTES = tostring(4 * MiB),
            QUEEN_EPHEMERAL_MAX_CLIENT_BYTES = tostring(BUDGET),
            -- No bound per peer: only the client budget holds the edge.
            QUEEN_EPHEMERAL_RELAY_MAX_PEER_BYTES = "0",
        })
        local a, b = ds[1], ds[2]
        local frozen, conns = nil, {}
        finally(function()
            for _, c in ipairs(conns) do c:close() end
            if frozen then os.execute("kill -CONT " .. frozen) end
            daemon.stop_all(ds)
        end)
        daemon.await_cell(ds, 10)
        local part, mine
        for i = 1, 60 do
            local p = "p-" .. i
            assert.equals(201, a:push("evict", { "1" }, p).status)
            if b:held("evict")[p] then part = part or p else mine = mine or p end
            if part and mine then break end
        end
        assert.truthy(part and mine, "no partition of each broker in 60")
        os.execute("kill -STOP " .. b.pid)
        frozen = b.pid
        local EVICTED = "queen_ephemeral_clients_evicted_total (%d+)"
        local CLIENT = "queen_ephemeral_client_bytes (%d+)"
        local function body(p, bytes)
            return '{"queue":"evict","partition":"' .. p .. '","messages":'
                   .. '[{"payload":"' .. ("x"):rep(bytes) .. '"}]}'
        end
        local relayed = daemon.format("POST", "/api/v1/ephemeral/push",
                                      body(part, H))
        local held = 0
        local function relay()
            local c = a:connect()
            conns[#conns + 1] = c
            c:send(relayed)
            held = held + 1
            daemon.wait_until("relayed push " .. #conns .. "'s bytes counted",
                function() return a:metric(CLIENT) >= held * H end, 10)
        end
        for round = 1, 3 do
            while held < 7 do relay() end
            assert.equals(round - 1, a:metric(EVICTED))
            -- A local push, its first 1.25 MiB sent: held partial in a
            -- 2 MiB buffer, it passes the budget.
            local raw = daemon.format("POST", "/api/v1/ephemeral/push",
                                      body(mine, 3 * MiB / 2))
            local cut = 5 * MiB / 4
            local c = a:connect()
            c:send(raw:sub(1, cut))
            a:await_metric(EVICTED, round)
            held = held - 1
            c:send(raw:sub(cut + 1))
            local res = assert(c:receive(10))
            c:close()
            -- Appended, or refused by the queue's own bounds.
            assert.is_true(res.status == 201 or res.json.code == "queue_full",
                           res.body)
        end
        -- Each eviction closed a held relay (cancelled at the edge), with
        -- no answer; the others are held still.
        assert.equals(3, a:metric('queen_ephemeral_forwarded_total'
            .. '{route="push",outcome="cancelled"} (%d+)'))
        local bytes = a:metric(CLIENT)
        assert.is_true(bytes >= 6 * H and bytes <= BUDGET,
                       "client bytes " .. bytes)
        local closed = 0
        for _, c in ipairs(conns) do
            local res, err = c:receive(0.2)
            assert.is_nil(res)
            if err == "closed" then closed = closed + 1 end
        end
        assert.equals(3, closed)
        -- The edge serves on.
        assert.equals(200, a:request("GET", "/metrics").status)
        -- b back, the held ones are answered and their bytes given back.
        os.execute("kill -CONT " .. b.pid)
        frozen = nil
        local answered = 0
        for _, c in ipairs(conns) do
            local res = c:receive(10)
            if res then
                assert.is_true(res.status == 201
                               or res.json.code == "queue_full", res.body)
                answered = answered + 1
            end
        end
        assert.equals(6, answered)
        daemon.wait_until("the held bytes to be given back", function()
            return a:metric(CLIENT) < MiB
        end, 5)
    end)
end)
