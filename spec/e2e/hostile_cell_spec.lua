-- The cell against a hostile client and a hostile neighbour (docs/cell.md):
-- whatever is written into queen.ephemeral_members, sent to a broker's
-- cell routes or left half-done through an edge, no broker blocks its
-- loop, holds bytes it does not count, or changes anything for a request
-- that is not its cell's.
local daemon = require("e2e.daemon")
local mark = require("e2e.mark")
local socket = require("socket")

local TOKEN = "hostile-cell-spec-token-0123456789"
-- Under the sanitizers every read costs several times its time: how long
-- the loop is held is asserted on a plain build only.
local SANITIZED = os.getenv("EPHD_SANITIZED") ~= nil
local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400",
              QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN }

-- The longest a broker took to answer /health over `seconds`: how long its
-- loop was held by anything else meanwhile.
local function worst_health(d, seconds)
    local worst, t_end = 0, daemon.now() + seconds
    while daemon.now() < t_end do
        local t0 = daemon.now()
        assert.equals(200, d:request("GET", "/health").status)
        worst = math.max(worst, daemon.now() - t0)
        socket.sleep(0.01)
    end
    return worst
end

describe("a hostile neighbour", function()
    it("cannot hold a broker's loop with rows it cannot sign", function()
        local a = daemon.start({ db = true, env = ENV })
        -- The rows go first: a stop that fails must not leave them to
        -- every later spec on this database.
        finally(function()
            daemon.sql("DELETE FROM queen.ephemeral_members")
            a:stop()
        end)
        daemon.wait_until("a fresh view", function() return a:cell().fresh end)
        -- 50,000 unsigned rows that are never collected (a TTL of 24 days
        -- puts their collection past the spec): each is ignored at every
        -- beat (ten a second at this TTL), and logged only so often.
        daemon.sql("INSERT INTO queen.ephemeral_members (id, address, epoch, "
                   .. "ttl_ms) SELECT 'a' || lpad(to_hex(g), 15, '0'), "
                   .. "'http://127.0.0.1:1', 7, 2147483647 "
                   .. "FROM generate_series(1, 50000) g")
        a:await_log("event=member_row_ignored", 10)
        -- Every beat reads the rows; none holds the loop for long. (Each
        -- used to compare every ignored row with every other: a second
        -- of the loop per beat, the broker at 100% CPU.)
        local worst = worst_health(a, 3)
        assert.is_true(SANITIZED or worst < 0.25, ("held %.3f s"):format(worst))
        local log = a:await_log("event=member_rows_ignored ", 10)
        assert.truthy(log:find("event=member_rows_ignored ", 1, true))
        local _, logged = log:gsub("event=member_row_ignored ", "")
        assert.is_true(logged <= 16, logged .. " rows logged")
        assert.is_true(a:cell().fresh)
    end)

    it("cannot hold a broker's loop with rows of megabytes", function()
        local a = daemon.start({ db = true, env = ENV })
        -- The rows go first: a stop that fails must not leave them to
        -- every later spec on this database.
        finally(function()
            daemon.sql("DELETE FROM queen.ephemeral_members")
            a:stop()
        end)
        daemon.wait_until("a fresh view", function() return a:cell().fresh end)
        -- Twenty rows of 6 MB each, read at every beat (ten a second).
        daemon.sql("INSERT INTO queen.ephemeral_members (id, address, epoch, "
                   .. "ttl_ms, mac) SELECT 'b' || lpad(to_hex(g), 15, '0'), "
                   .. "repeat('h', 5000000), 7, "
                   .. "2147483647, repeat('m', 1000000) "
                   .. "FROM generate_series(1, 20) g")
        a:await_log("event=member_row_ignored", 10)
        -- A row's values are read only as far as a member's could go:
        -- each beat reads kilobytes, not 120 MB (which held the loop for
        -- 0.4 s a beat).
        local worst = worst_health(a, 2)
        assert.is_true(SANITIZED or worst < 0.1, ("held %.3f s"):format(worst))
        assert.is_true(a:cell().fresh)
    end)

    it("cannot replay a member's leaving notice to make a live member leave",
       function()
        local ds = daemon.start_cell(2, ENV)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local vb = b:cell().self
        local epoch = tonumber(vb.epoch, 16)
        local NOBODY = "00000000-0000-0000-0000-000000000000"
        local function notice(body, h)
            h = h or {}
            h["Content-Type"] = "application/json"
            local id, ep = body:match('"id":"(%x+)","epoch":(%d+)')
            return a:request("POST", "/api/v1/ephemeral/leaving?id=" .. id
                             .. "&epoch=" .. ep, body, h)
        end
        -- What a member's notice puts on the wire, as a neighbour sees it:
        -- a session opened with it (a member unknown here: nothing leaves).
        local told = ('{"id":"%s","epoch":%d}'):format("f00000000000000d",
                                                      epoch)
        local seen = mark.session(TOKEN, "127.0.0.1:" .. a.port)
        local res = notice(told, mark.headers(TOKEN, a, NOBODY,
                                              { session = seen }))
        assert.equals(200, res.status, res.body)
        -- Sent again with a notice naming b: the session is spent.
        local forged = ('{"id":"%s","epoch":%d}'):format(vb.id, epoch)
        res = notice(forged, mark.headers(TOKEN, a, NOBODY,
                                          { session = seen }))
        assert.equals(401, res.status, res.body)
        assert.equals("unauthorized", res.json.code)
        -- Without any mark, or a mark alone: refused, and b stays.
        res = notice(forged)
        assert.equals(401, res.status, res.body)
        res = notice(forged, { ["X-Queen-Forward"] = NOBODY })
        assert.equals(401, res.status, res.body)
        -- A member's own session with a target naming another member than
        -- its body: refused as malformed.
        res = a:request("POST", "/api/v1/ephemeral/leaving?id=f00000000000000d"
                        .. "&epoch=" .. epoch, forged,
                        mark.headers(TOKEN, a, NOBODY,
                                     { extra = { ["Content-Type"] =
                                                 "application/json" } }))
        assert.equals(400, res.status, res.body)
        assert.equals("ephemeral_bad_request", res.json.code)
        for _ = 1, 5 do
            local v = a:cell()
            assert.equals(2, v.live)
            assert.is_nil(a:read_log():find("reason=leaving", 1, true))
            daemon.sleep(0.1) -- a few of a's beats, each a new view
        end
    end)

    it("leaves every broker running, holding nothing, when its pops through "
       .. "an edge are left at every moment", function()
        local ds = daemon.start_cell(3, ENV)
        local open = {}
        finally(function()
            for _, c in ipairs(open) do c:close() end
            daemon.stop_all(ds)
        end)
        daemon.await_cell(ds, 10)
        for i = 1, 24 do
            assert.equals(201, ds[1 + i % 3]:push("left", { i, 100 + i },
                                                  "p-" .. i).status)
        end
        -- Relayed pops naming their partition (with and without a group),
        -- pops over the whole cell, waiting or not, committing on delivery
        -- or not: each client leaves at once, a moment later, after the
        -- answer's first line, or with twenty others.
        local queries = {
            "queue=left&commitOnDelivery=true&batch=3",
            "queue=left&commitOnDelivery=true&wait=true&timeout=2000",
            "queue=left&partition=p-%d&commitOnDelivery=true",
            "queue=left&partition=p-%d&autoAck=true&wait=true&timeout=1000",
            "queue=left&partition=p-%d&group=g&wait=true&timeout=1000",
            "queue=left&group=g&commitOnDelivery=true&wait=true&timeout=500",
        }
        for i = 1, 150 do
            local d = ds[1 + i % 3]
            local c = socket.connect("127.0.0.1", d.port)
            c:setoption("tcp-nodelay", true)
            c:send(daemon.format("GET", "/api/v1/ephemeral/pop?"
                .. queries[1 + i % #queries]:format(1 + i % 24)))
            local how = i % 4
            if how == 1 then
                socket.sleep(0.001 * (i % 7))
            elseif how == 2 then
                c:settimeout(5)
                c:receive("*l")
            end
            if how == 3 then open[#open + 1] = c else c:close() end
            if #open >= 20 or i == 150 then
                for _, o in ipairs(open) do o:close() end
                open = {}
            end
        end
        -- Nothing is left parked anywhere, and what is held for clients
        -- is what the relay's idle keep-alive connections keep (a read
        -- buffer each); each broker stops cleanly (a sanitizer's report,
        -- such as memcpy given a pop's absent group, fails the stop).
        for _, d in ipairs(ds) do
            d:await_parked(0, 5)
            d:await_metric("\nqueen_ephemeral_client_bytes (%d+)",
                           function(v) return v <= 64 * 1024 end, 5)
        end
        for _, d in ipairs(ds) do assert.is_true(d:alive()) end
    end)

    it("hears a member's refusal of a waiting pop over the whole cell, not "
       .. "an empty batch at once it would ask again for at once", function()
        local env = { QUEEN_EPHEMERAL_MAX_PARKED = "1" }
        for k, v in pairs(ENV) do env[k] = v end
        local ds = daemon.start_cell(2, env)
        local held
        finally(function()
            if held then held:close() end
            daemon.stop_all(ds)
        end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        -- The tenant's one parked slot on each member, taken by one pop.
        held = a:connect()
        held:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=slots"
                                .. "&wait=true&timeout=10000"))
        a:await_parked(1)
        b:await_parked(1)
        -- A second pop that would wait: no member parks it. A local pop
        -- hears rate_limited then, and so does this one.
        local t0 = daemon.now()
        local res = a:pop("queue=slots&wait=true&timeout=5000")
        assert.equals(429, res.status, res.body)
        assert.equals("rate_limited", res.json.code)
        assert.truthy(res.headers["retry-after"])
        assert.is_true(daemon.now() - t0 < 2)
        -- The first still waits, and is woken by a push.
        assert.equals(201, b:push("slots", { "7" }, "p").status)
        res = assert(held:receive(5))
        assert.equals(200, res.status, res.body)
        assert.equals(7, res.json.messages[1].payload)
    end)

    it("counts an ack split over the cell as its client's bytes while its "
       .. "parts are out", function()
        local ds = daemon.start_cell(2, {
            QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
            -- b stays in the view while stopped, and nothing times out.
            QUEEN_EPHEMERAL_MEMBER_TTL_MS = "60000",
            QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS = "60000",
        })
        local a, b = ds[1], ds[2]
        local conns, frozen = {}, nil
        finally(function()
            for _, c in ipairs(conns) do c:close() end
            if frozen then os.execute("kill -CONT " .. frozen) end
            daemon.stop_all(ds)
        end)
        daemon.await_cell(ds, 10)
        local ea, eb = a:cell().self.epoch, b:cell().self.epoch
        -- Ids of both members: a settles its own and sends b a part, which
        -- waits on b, stopped.
        local items = {}
        for i = 1, 10000 do
            items[i] = ('{"id":"e:%s:p:%d","status":"completed"}')
                :format(i % 2 == 0 and ea or eb, i)
        end
        local body = '{"queue":"q","group":"g","acks":['
                     .. table.concat(items, ",") .. ']}'
        os.execute("kill -STOP " .. b.pid)
        frozen = b.pid
        local CLIENT_BYTES = "\nqueen_ephemeral_client_bytes (%d+)"
        for i = 1, 10 do
            conns[i] = a:connect()
            conns[i]:send(daemon.format("POST", "/api/v1/ephemeral/ack", body))
        end
        -- Each holds at least its part for b (half the ids): counted.
        a:await_metric(CLIENT_BYTES, function(v) return v >= 10 * #body / 2 end)
        -- Its clients gone, nothing is held for them.
        for _, c in ipairs(conns) do c:close() end
        conns = {}
        a:await_metric(CLIENT_BYTES, function(v) return v < 64 * 1024 end)
    end)

    it("leaves no TIME-WAIT behind for each relayed wait it gives up",
       function()
        local ds = daemon.start_cell(3, ENV)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        -- Connections to port in TIME-WAIT: the side that closed first
        -- holds one for a minute, and each holds a local port of the
        -- 28,000 a host has to reach one peer.
        local function time_wait(port)
            local p = io.popen("ss -tanH state time-wait '( dport = :"
                               .. port .. " )' | wc -l")
            local n = tonumber(p:read("*a"))
            p:close()
            return n
        end
        -- This spec's own requests go on kept-alive connections: each
        -- one it closed would be a TIME-WAIT of its own to count.
        local kb, kc = b:connect(), c:connect()
        local function parked(k)
            return tonumber(k:request("GET", "/metrics").body
                            :match("\nqueen_ephemeral_parked_polls (%d+)"))
        end
        local before = time_wait(b.port) + time_wait(c.port)
        -- Waiting pops over the whole cell through a, each woken by a push
        -- on b: a gives up the other members' waits (cancels its notifies
        -- in flight), every one.
        for i = 1, 50 do
            local conn = a:connect()
            conn:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=tw"
                                    .. "&wait=true&timeout=5000"))
            daemon.wait_until("the pop to wait everywhere", function()
                return parked(kb) >= 1 and parked(kc) >= 1
            end, 5, 0.005)
            assert.equals(201, kb:request("POST", "/api/v1/ephemeral/push",
                '{"queue":"tw","partition":"p' .. i
                .. '","messages":[{"payload":' .. i .. '}]}').status)
            local res = assert(conn:receive(5))
            assert.equals(1, #res.json.messages, res.body)
            conn:close()
        end
        -- A request given up in flight ends its connection with a reset:
        -- no minute of TIME-WAIT on a port for each (there were two or
        -- three a pop; at a few hundred pops a second, the edge ran out of
        -- ports to its members).
        local grew = time_wait(b.port) + time_wait(c.port) - before
        kb:close()
        kc:close()
        assert.is_true(grew < 25, grew .. " TIME-WAIT connections to members")
    end)
end)
