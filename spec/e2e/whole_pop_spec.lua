-- A pop naming no partition over the whole cell (docs/cell.md, "A pop
-- without a partition"): through any broker it drains every partition of
-- the queue, whoever owns it, a waiting one is woken by a push to any
-- partition, and a commitOnDelivery pop whose client leaves takes nothing
-- it does not deliver.
local daemon = require("e2e.daemon")

local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400",
              QUEEN_EPHEMERAL_CELL_TOKEN = "whole-pop-spec-cell-token-012345" }

-- The cell is awaited after the test's finally is set (which stops it
-- whatever fails), never inside a helper: busted keeps one finally.
local function start(n)
    return daemon.start_cell(n, ENV)
end

-- The broker of ds holding partition part of queue.
local function holder(ds, queue, part)
    for _, d in ipairs(ds) do
        if d:held(queue)[part] then return d end
    end
end

-- A partition of queue that owner holds, found by pushing one message at
-- a time through via (each then taken, so the queue is left empty).
local function partition_on(ds, via, owner, queue)
    for i = 1, 60 do
        local part = "p-" .. i
        assert.equals(201, via:push(queue, { "0" }, part).status)
        local d = holder(ds, queue, part)
        local res = d:pop("queue=" .. queue .. "&partition=" .. part
                          .. "&commitOnDelivery=true")
        assert.equals(1, #res.json.messages, res.body)
        if d == owner then return part end
    end
    error("no partition of " .. queue .. " landed on the owner")
end

describe("a pop naming no partition", function()
    it("drains, through one broker, every partition spread over the cell, "
       .. "taking from each member in turn", function()
        local ds = start(3)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a = ds[1]
        local pushed, owners = {}, {}
        for i = 1, 24 do
            local part = "p-" .. i
            assert.equals(201, a:push("spread", { i, 100 + i, 200 + i },
                                      part).status)
            pushed[i], pushed[100 + i], pushed[200 + i] = true, true, true
        end
        for i = 1, 24 do
            local d = holder(ds, "spread", "p-" .. i)
            owners[d] = (owners[d] or 0) + 1
        end
        local n = 0
        for _ in pairs(owners) do n = n + 1 end
        assert.equals(3, n, "the partitions are not on every member")
        -- One message a pop: three pops in a row each come from another
        -- member (the turn moves on at every pop), while all have some.
        local got, from = {}, {}
        for _ = 1, 3 do
            local res = a:pop("queue=spread")
            assert.equals(200, res.status, res.body)
            assert.equals(1, #res.json.messages, res.body)
            local m = res.json.messages[1]
            from[holder(ds, "spread", m.partition)] = true
            got[m.payload] = true
        end
        n = 0
        for _ in pairs(from) do n = n + 1 end
        assert.equals(3, n, "three pops did not take from three members")
        for _ = 1, 100 do
            local res = a:pop("queue=spread&batch=5")
            assert.equals(200, res.status, res.body)
            if #res.json.messages == 0 then break end
            for _, m in ipairs(res.json.messages) do
                assert.is_nil(got[m.payload], "delivered twice")
                got[m.payload] = true
            end
        end
        for p in pairs(pushed) do assert.is_true(got[p], tostring(p)) end
    end)

    it("waiting through one broker, is woken by a push to a partition "
       .. "another member owns", function()
        local ds = start(3)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        local part = partition_on(ds, c, b, "wake")
        local conn = a:connect()
        conn:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=wake"
                                .. "&wait=true&timeout=8000"))
        -- Wherever it waits (a push finding a member before its wait does
        -- is seen when the wait arrives).
        daemon.wait_until("the pop to wait", function()
            return a:parked() + b:parked() + c:parked() >= 1
        end)
        local t0 = daemon.now()
        assert.equals(201, c:push("wake", { "42" }, part).status)
        local res = assert(conn:receive(10))
        conn:close()
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages, res.body)
        assert.equals(42, res.json.messages[1].payload)
        assert.equals(part, res.json.messages[1].partition)
        assert.is_true(daemon.now() - t0 < 3, "woken late")
        -- The other members' waits were given up with it.
        for _, d in ipairs(ds) do d:await_parked(0) end
    end)

    it("waiting, finds within a second a message pushed to a member that "
       .. "refused its notify", function()
        -- b parks one pop of the tenant at most, and one is parked there
        -- (another queue's): it refuses the whole pop's notify.
        local env_b = {}
        for k, v in pairs(ENV) do env_b[k] = v end
        env_b.QUEEN_EPHEMERAL_MAX_PARKED = "1"
        local ds = {}
        finally(function() daemon.stop_all(ds) end)
        ds[1] = daemon.start({ db = true, env = ENV })
        ds[2] = daemon.start({ db = true, env = env_b })
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local part = partition_on(ds, a, b, "deaf")
        local other = b:connect()
        other:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=elsewhere"
                                 .. "&wait=true&timeout=20000"))
        b:await_parked(1)
        local conn = a:connect()
        conn:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=deaf"
                                .. "&wait=true&timeout=12000"))
        -- Pushed once b has refused the notify (the sweep's take before
        -- it would find the message whatever the notify did).
        daemon.wait_until("b to refuse the notify", function()
            return b:metric('queen_ephemeral_refusals_total{code="rate_limited"}'
                            .. " (%d+)") >= 1
        end)
        local t0 = daemon.now()
        assert.equals(201, b:push("deaf", { "7" }, part).status)
        local res = assert(conn:receive(15))
        conn:close()
        other:close()
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages, res.body)
        assert.equals(7, res.json.messages[1].payload)
        -- Found by a recheck's take, not at the timeout (12 s).
        assert.is_true(daemon.now() - t0 < 4, "found late")
    end)

    it("waiting, takes from one member that refused its notify at a time, "
       .. "leaving the others' messages unleased", function()
        -- b and c each park one pop of the tenant at most, and one is
        -- parked at each: both refuse the notify. A recheck that took from
        -- both at once would write one answer and leave the other's
        -- message leased, hidden until its lease ran out.
        local env_1 = {}
        for k, v in pairs(ENV) do env_1[k] = v end
        env_1.QUEEN_EPHEMERAL_MAX_PARKED = "1"
        local ds = {}
        finally(function() daemon.stop_all(ds) end)
        ds[1] = daemon.start({ db = true, env = ENV })
        ds[2] = daemon.start({ db = true, env = env_1 })
        ds[3] = daemon.start({ db = true, env = env_1 })
        daemon.await_cell(ds, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        local parts = { [b] = partition_on(ds, a, b, "deaf2"),
                        [c] = partition_on(ds, a, c, "deaf2") }
        local others = {}
        for _, d in ipairs({ b, c }) do
            local o = d:connect()
            o:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=elsewhere"
                                 .. "&wait=true&timeout=20000"))
            others[#others + 1] = o
            d:await_parked(1)
        end
        local conn = a:connect()
        conn:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=deaf2"
                                .. "&wait=true&timeout=12000"))
        for _, d in ipairs({ b, c }) do
            daemon.wait_until("the notify to be refused", function()
                return d:metric('queen_ephemeral_refusals_total{code='
                                .. '"rate_limited"} (%d+)') >= 1
            end)
        end
        assert.equals(201, b:push("deaf2", { "7" }, parts[b]).status)
        assert.equals(201, c:push("deaf2", { "8" }, parts[c]).status)
        local res = assert(conn:receive(15))
        conn:close()
        for _, o in ipairs(others) do o:close() end
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages, res.body)
        -- The other member's message was not taken: a pop there gets it.
        local from = res.json.messages[1].payload == 7 and b or c
        local rest = from == b and c or b
        local got = rest:pop("queue=deaf2&partition=" .. parts[rest])
        assert.equals(200, got.status, got.body)
        assert.equals(1, #got.json.messages, "the other's message is leased")
    end)

    it("with commitOnDelivery, takes nothing for a client that left while "
       .. "it waited", function()
        local ds = start(3)
        finally(function()
            for _, d in ipairs(ds) do os.execute("kill -CONT " .. d.pid) end
            daemon.stop_all(ds)
        end)
        daemon.await_cell(ds, 10)
        -- Default's owner, and an edge and a pusher that are not it.
        assert.equals(201, ds[1]:push("cod", { "0" }).status)
        local owner = holder(ds, "cod", "Default")
        -- A lease that outlives the test would hide a message taken and
        -- not delivered as well as a lost one: a short one tells them
        -- apart (configured through the owner, which applies it at once).
        local res = owner:request("POST", "/api/v1/ephemeral/configure",
                                  '{"queue":"cod","options":{"leaseSeconds":1}}')
        assert.equals(201, res.status, res.body)
        local others = {}
        for _, d in ipairs(ds) do
            if d ~= owner then others[#others + 1] = d end
        end
        local edge, pusher = others[1], others[2]
        assert.equals(1, #owner:pop("queue=cod&partition=Default"
                                    .. "&commitOnDelivery=true").json.messages)
        local conn = edge:connect()
        conn:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=cod"
                                .. "&wait=true&timeout=8000"
                                .. "&commitOnDelivery=true"))
        daemon.wait_until("the pop to wait at Default's owner", function()
            return owner:parked() >= 1
        end)
        -- The edge frozen, a push wakes what waits at the owner, and the
        -- client leaves before the edge can pass anything back.
        os.execute("kill -STOP " .. edge.pid)
        assert.equals(201, pusher:push("cod", { "7" }).status)
        owner:await_parked(0)
        conn:close()
        os.execute("kill -CONT " .. edge.pid)
        -- The message was never taken, or only leased: a pop gets it.
        local got = daemon.wait_until("the message to be delivered again",
                                      function()
            local res = pusher:pop("queue=cod&partition=Default"
                                   .. "&commitOnDelivery=true")
            assert.equals(200, res.status, res.body)
            return res.json.messages[1]
        end, 15, 0.2)
        assert.equals(7, got.payload)
    end)

    it("reads notify only from a member: a client's takes as any pop",
       function()
        local d = daemon.start()
        finally(function() d:stop() end)
        assert.equals(201, d:push("plain", { "5" }).status)
        local res = d:pop("queue=plain&notify=true")
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages, res.body)
        assert.is_nil(res.json.ready)
    end)
    it("is counted in queen_ephemeral_forwarded_total, route pop_whole",
       function()
        local ds = start(2)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local function forwarded(route, outcome)
            return a:metric('queen_ephemeral_forwarded_total{route="' .. route
                            .. '",outcome="' .. outcome .. '"} (%d+)')
        end
        -- Nothing anywhere: each is served over the cell, and answered.
        for _ = 1, 3 do
            local res = a:pop("queue=counted")
            assert.equals(200, res.status, res.body)
            assert.equals(0, #res.json.messages, res.body)
        end
        assert.equals(3, forwarded("pop_whole", "answered"))
        -- A waiting one whose client leaves.
        local conn = a:connect()
        conn:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=counted"
                                .. "&wait=true&timeout=8000"))
        daemon.wait_until("the pop to wait", function()
            return b:parked() >= 1
        end)
        conn:close()
        a:await_metric('queen_ephemeral_forwarded_total{route="pop_whole",'
                       .. 'outcome="cancelled"} (%d+)', 1)
        assert.equals(3, forwarded("pop_whole", "answered"))
        assert.equals(0, forwarded("pop_whole", "failed"))
        -- Not counted again as the relay of a pop naming a partition.
        assert.equals(0, forwarded("pop", "answered"))
    end)
    it("waiting on a queue with a windowBuffer, is answered by one take, "
       .. "never a round of ready and empty takes", function()
        -- windowBuffer never makes a message undeliverable: it lets a
        -- woken parked pop wait to fatten its batch. A notify answers
        -- ready by the same test a take takes by, and a take never waits.
        local env = { QUEEN_EPHEMERAL_REFRESH_S = "1" }
        for k, v in pairs(ENV) do env[k] = v end
        local ds = daemon.start_cell(2, env)
        finally(function()
            daemon.stop_all(ds)
            -- Its declaration would leak into later specs' listings.
            daemon.forget_declarations()
        end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local res = a:request("POST", "/api/v1/ephemeral/configure",
            '{"queue":"windowed","options":{"windowBuffer":'
            .. '{"ms":2000,"count":5}}}')
        assert.equals(201, res.status, res.body)
        -- b applies it at its refresh.
        daemon.wait_until("b to apply the window", function()
            for _, q in ipairs(b:request("GET", "/api/v1/ephemeral/queues")
                               .json.queues) do
                if q.queue == "windowed" then
                    return q.options.windowBuffer.ms == 2000
                end
            end
        end, 10)
        local part = partition_on(ds, b, b, "windowed")
        local POPS = 'queen_ephemeral_http_requests_total{route="pop",'
                     .. 'status="200"} (%d+)'
        local before = b:metric(POPS)
        local conn = a:connect()
        conn:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=windowed"
                                .. "&wait=true&timeout=6000&batch=10"))
        daemon.wait_until("the pop to wait at b", function()
            return b:parked() >= 1
        end)
        assert.equals(201, b:push("windowed", { "7" }, part).status)
        res = assert(conn:receive(10))
        conn:close()
        -- b served the sweep's take, the notify and one take (a spin
        -- would be hundreds).
        local pops = b:metric(POPS) - before
        assert.is_true(pops <= 4, pops .. " pops served at b")
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages, res.body)
        assert.equals(7, res.json.messages[1].payload)
    end)
end)
