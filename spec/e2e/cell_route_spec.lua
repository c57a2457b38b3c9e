-- Clients that route each request to its owner (docs/client.md, "Routing
-- to the owner"): a relayed answer names its owner's address, the
-- placement view any identity may read places every partition where the
-- brokers do, and ephd.client with `route` sends (nearly) nothing that the
-- cell must relay, whether its view is right or stale.
local client = require("ephd.client")
local daemon = require("e2e.daemon")
local placement = require("ephd.placement")

local TOKEN = "cell-route-spec-token-0123456789abcdef"
local ENV = { QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
              QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400" }

local function url(d) return "http://127.0.0.1:" .. d.port end

-- Every relayed request a broker counted, whatever became of it.
local function forwarded(d)
    local n = 0
    for v in d:request("GET", "/metrics").body:gmatch(
            "\nqueen_ephemeral_forwarded_total{[^}]*} (%d+)") do
        n = n + tonumber(v)
    end
    return n
end

local function view_of(d)
    local res = d:request("GET", "/api/v1/ephemeral/cell")
    assert.equals(200, res.status, res.body)
    return res.json
end

local function push(d, queue, partition)
    return d:request("POST", "/api/v1/ephemeral/push",
                     '{"queue":"' .. queue .. '","partition":"' .. partition
                     .. '","messages":[{"payload":1}]}')
end

describe("owner hints", function()
    it("name a relayed answer's owner, never a direct one's; and the view "
       .. "places partitions as the brokers do", function()
        local ds = { daemon.start({ db = true, env = ENV }) }
        finally(function() daemon.stop_all(ds) end)
        local a = ds[1]
        local alone = view_of(a)
        ds[2] = daemon.start({ db = true, env = ENV })
        local b = ds[2]
        daemon.await_cell(ds, 10)
        local va, vb = view_of(a), view_of(b)
        -- One view, one version, on both; another than the cell of one's.
        assert.equals(va.version, vb.version)
        assert.not_equals(alone.version, va.version)
        assert.equals(va.version, a:cell().version)
        assert.equals(placement.HASH, va.hash)
        assert.equals("00000000-0000-0000-0000-000000000001", va.tenant)
        assert.equals(2, #va.members)
        assert.is_true(va.members[1].id < va.members[2].id)
        local address = {}
        for _, m in ipairs(va.members) do
            address[m.id] = m.address
            m.id = placement.id(m.id)
        end
        assert.equals(url(a), address[va.self])
        assert.equals(url(b), address[vb.self])
        local direct, relayed = 0, 0
        for i = 1, 24 do
            local res = push(a, "hinted", "p-" .. i)
            assert.equals(201, res.status, res.body)
            local owner = placement.owner(va.members, va.tenant, "hinted",
                                          "p-" .. i)
            if owner.address == url(a) then
                direct = direct + 1
                assert.is_nil(res.headers["x-queen-owner-address"])
            else
                relayed = relayed + 1
                assert.equals(url(b), res.headers["x-queen-owner-address"])
            end
        end
        assert.is_true(direct > 0 and relayed > 0)
        -- Where the view places them is where they are held.
        local held_a, held_b = a:held("hinted"), b:held("hinted")
        for i = 1, 24 do
            local p = "p-" .. i
            local at = placement.owner(va.members, va.tenant, "hinted", p)
            assert.equals(at.address == url(a), held_a[p] ~= nil, p)
            assert.equals(at.address == url(b), held_b[p] ~= nil, p)
        end
    end)
end)

describe("ephd.client routing to owners", function()
    it("sends (nearly) nothing the cell relays, and delivers everything",
       function()
        local ds = daemon.start_cell(2, ENV)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local c = client.new({ url = url(a), route = true })
        finally(function()
            c:close()
            daemon.stop_all(ds)
        end)
        local before = forwarded(a) + forwarded(b)
        local N = 40
        for i = 1, N do
            assert.equals(1, assert(c:push("routed", { i },
                                           { partition = "p-" .. i })))
        end
        local got = {}
        for i = 1, N do
            local msgs = assert(c:pop("routed", { partition = "p-" .. i,
                                                  group = "g" }))
            assert.equals(1, #msgs)
            got[#got + 1] = msgs[1].payload
            local results = assert(c:ack("routed", { msgs[1].id },
                                         { group = "g" }))
            assert.equals("acked", results[1].outcome)
        end
        table.sort(got)
        for i = 1, N do assert.equals(i, got[i]) end
        assert.equals(0, forwarded(a) + forwarded(b) - before)
        assert.equals(2, #c.members)

        -- Without routing, the same traffic is relayed about half the time.
        local plain = client.new({ url = url(a) })
        for i = 1, N do
            assert(plain:push("plain", { i }, { partition = "p-" .. i }))
        end
        plain:close()
        assert.is_true(forwarded(a) + forwarded(b) - before >= N / 4)
    end)

    it("works with a stale view, and learns the new one from the hints",
       function()
        local ds = { daemon.start({ db = true, env = ENV }) }
        finally(function() daemon.stop_all(ds) end)
        local a = ds[1]
        local c = client.new({ url = url(a), route = true })
        assert(c:push("stale", { 0 }, { partition = "p-0" }))
        assert.equals(1, #c.members) -- a cell of one: nothing to place
        ds[2] = daemon.start({ db = true, env = ENV })
        daemon.await_cell(ds, 10)
        -- The client's view is a cell of one: everything goes to a, which
        -- relays half; the hints send the client to read the view again.
        local i = 0
        daemon.wait_until("the client to read the new view", function()
            i = i + 1
            assert(c:push("stale", { i }, { partition = "p-" .. i }))
            return #c.members == 2
        end, 10, 0.05)
        local before = forwarded(a) + forwarded(ds[2])
        for j = i + 1, i + 40 do
            assert(c:push("stale", { j }, { partition = "p-" .. j }))
        end
        assert.equals(0, forwarded(a) + forwarded(ds[2]) - before)
        local total = 0
        for _, d in ipairs(ds) do
            for _, n in pairs(d:held("stale")) do total = total + n end
        end
        assert.equals(i + 41, total)
        c:close()
    end)

    it("goes on through the broker it was given when an owner dies, and "
       .. "routes to owners again once the view says so", function()
        local ds = daemon.start_cell(2, ENV)
        local c
        finally(function()
            if c then c:close() end
            ds[2].stopped = true -- killed below: nothing to stop
            daemon.stop_all(ds)
        end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        c = client.new({ url = url(a), route = true })
        local N = 16
        for i = 1, N do
            assert.equals(1, assert(c:push("dies", { i },
                                           { partition = "p-" .. i })))
        end
        assert.equals(2, #c.members)
        os.execute("kill -KILL " .. b.pid)
        b:await_exit(5)
        -- Every push is answered, with its 201 or a refusal of the
        -- taxonomy (b's partitions fail at a until b's row is gone), or,
        -- for the one b's kept connection carried when it died, a
        -- transport error; none hangs. Within the deadline every
        -- partition is a's and every push lands there.
        local pushed, bad = {}, {}
        local round = 0
        daemon.wait_until("every push to land at a", function()
            round = round + 1
            local all = true
            for i = 1, N do
                local n, err = c:push("dies", { 100 * round + i },
                                      { partition = "p-" .. i })
                if n == 1 then
                    pushed[#pushed + 1] = 100 * round + i
                else
                    all = false
                    local code = err and (err.code or err.message)
                    if err and err.status then
                        assert.equals(503, err.status, tostring(code))
                        assert.truthy(code == "ephemeral_forward_failed"
                                      or code == "owner_moved", code)
                    else
                        bad[#bad + 1] = tostring(code)
                    end
                end
            end
            return all
        end, 15, 0.05)
        assert.is_true(#bad <= 2, table.concat(bad, "; "))
        -- What it pushed since is all at a, and its view is a alone.
        local held = 0
        for _, n in pairs(a:held("dies")) do held = held + n end
        assert.is_true(held >= #pushed, held .. " held of " .. #pushed)
        c:refresh_view()
        assert.equals(1, #c.members)
    end)
end)
