-- Ownership moves (docs/cell.md, "Moves"): a member joining takes its
-- partitions from their old owners by a hand-over (messages, each group's
-- place, redeliveries, leases as redeliveries); what cannot be handed over
-- is emptied where it was (the loss contract), its old ids answer stale,
-- and the drop is counted.
local cjson = require("cjson")
local socket = require("socket")
local daemon = require("e2e.daemon")
local helper = require("helper")
local mark = require("e2e.mark")

local TOKEN = "moves-spec-cell-token-0123456789"
local function env(extra)
    local e = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400",
                QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN }
    for k, v in pairs(extra or {}) do e[k] = v end
    return e
end

local function await_live(ds, n, seconds)
    local t0 = daemon.now()
    for _, d in ipairs(ds) do
        while d:cell().live ~= n and daemon.now() - t0 < seconds do
            daemon.sleep(0.05)
        end
        assert.equals(n, d:cell().live, "the cell did not settle")
    end
end

local function WIPES(reason)
    return 'queen_ephemeral_wipes_total{reason="' .. reason .. '"} (%d+)'
end
local HANDED = "queen_ephemeral_handed_over_total (%d+)"

-- Placement (core/cell/placement.c) in LuaJIT's 64-bit integers: the
-- member of ids (16 hex digits each) that owns a partition of the default
-- tenant's queue, so a test knows where a move sends it before it moves.
local bit = require("bit")
local TENANT = "00000000-0000-0000-0000-000000000001"

local function mix(x)
    x = bit.bxor(x, bit.rshift(x, 33))
    x = x * 0xff51afd7ed558ccdULL
    x = bit.bxor(x, bit.rshift(x, 33))
    x = x * 0xc4ceb9fe1a85ec53ULL
    return bit.bxor(x, bit.rshift(x, 33))
end

local function absorb(h, s)
    h = mix(bit.bxor(h, 0ULL + #s))
    for i = 1, #s, 8 do
        local w = 0ULL
        for j = math.min(i + 7, #s), i, -1 do
            w = bit.bor(bit.lshift(w, 8), 0ULL + s:byte(j))
        end
        h = mix(bit.bxor(h, w))
    end
    return h
end

local function owner(ids, queue, partition)
    local key = absorb(absorb(absorb(0x9e3779b97f4a7c15ULL, TENANT), queue),
                       partition)
    local best, top
    for _, id in ipairs(ids) do
        local n = 0ULL
        for k = 1, 16 do
            n = n * 16 + tonumber(id:sub(k, k), 16)
        end
        local score = mix(bit.bxor(key, mix(n)))
        if not top or score > top or (score == top and id < best) then
            best, top = id, score
        end
    end
    return best
end

-- Starts spec/e2e/fake_member.lua (silent) as member id of epoch, a signed row
-- for it: a member that answers the readiness probe and nothing else.
-- Returns its pid.
local function silent_member(id, epoch)
    local port = daemon.free_port()
    local p = io.popen(("luajit %s/spec/e2e/fake_member.lua silent %d %s %d "
                        .. ">/dev/null 2>&1 & echo $!")
                       :format(helper.root, port, id, epoch))
    local pid = p:read("*l")
    p:close()
    daemon.wait_until("the silent member to listen", function()
        local c = socket.connect("127.0.0.1", port)
        if c then c:close() end
        return c
    end, 5)
    daemon.member_row(TOKEN, id, "http://127.0.0.1:" .. port, epoch, 600000)
    return pid
end

-- a alone owns every partition: three messages each, the first leased by
-- group g; group h has taken nothing. Returns the leased ids by partition.
local function fill(a, n)
    local ids = {}
    for i = 1, n do
        local part = "p-" .. i
        assert.equals(201, a:push("moving", { "1", "2", "3" }, part).status)
        local res = a:pop("queue=moving&group=g&batch=1&partition=" .. part)
        assert.equals(1, #res.json.messages)
        ids[part] = res.json.messages[1].id
        res = a:pop("queue=moving&group=h&batch=0&partition=" .. part)
    end
    return ids
end

-- The partitions a no longer holds anything of, once b has joined.
local function moved_from(a, n)
    local kept, moved = a:held("moving"), {}
    for i = 1, n do
        local part = "p-" .. i
        if kept[part] == 0 then moved[#moved + 1] = part
        else assert.equals(3, kept[part], part) end
    end
    assert.is_true(#moved > 0 and #moved < n, #moved .. " moved")
    return moved
end

local function pop_all(d, part, group)
    local res = d:pop("queue=moving&group=" .. group .. "&batch=10&partition="
                      .. part)
    assert.equals(200, res.status, res.body)
    return res.json.messages
end

describe("ownership moves", function()
    it("take a hand-over only from a member of the cell, never refused by "
       .. "the queue's bounds", function()
        local a = daemon.start({ env = env({
            QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "2" }) })
        finally(function() a:stop() end)
        local tenant = "00000000-0000-0000-0000-000000000001"
        -- A mark is a session's (mark.headers), or a value sent alone.
        local function hand(body, m)
            local h = type(m) == "table" and m or { ["X-Queen-Forward"] = m }
            h["Content-Type"] = "application/vnd.ephd-transfer"
            return a:request("POST", "/api/v1/ephemeral/handover", body, h)
        end
        local two = "ephd-transfer 1\n1 1 2 1\nqp\n0 1\n1\n0 1\n2\n"
                    .. "1 1 0\ng\n"
        local function signed()
            return mark.headers(TOKEN, a, tenant)
        end
        -- Unmarked: refused, as any route refuses a body it does not take
        -- (400), and forbidden even when the body claims to be JSON.
        local res = hand(two, nil)
        assert.equals(400, res.status, res.body)
        res = a:request("POST", "/api/v1/ephemeral/handover", "{}",
                        { ["Content-Type"] = "application/json" })
        assert.equals(403, res.status, res.body)
        assert.equals("forbidden", res.json.code)
        res = hand(two, "not-the-token-at-all " .. tenant)
        assert.equals(401, res.status, res.body)
        res = hand("ephd-transfer 1\n", signed())
        assert.equals(400, res.status, res.body)
        assert.equals("ephemeral_bad_request", res.json.code)
        res = hand(two, signed())
        assert.equals(200, res.status, res.body)
        assert.equals(2, res.json.accepted)
        -- g had been given the first: it is given the second only.
        res = a:pop("queue=q&partition=p&group=g&batch=10", {
            ["x-queen-tenant"] = tenant })
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages)
        assert.equals(2, res.json.messages[1].payload)
        -- At maxLength 2 with reject, a hand-over is still taken whole:
        -- its messages were admitted under their old owner's share of the
        -- queue. The next push meets the bound.
        res = hand(two, signed())
        assert.equals(200, res.status, res.body)
        assert.equals(2, res.json.accepted)
        res = a:push("q", { "3" }, "p", { ["x-queen-tenant"] = tenant })
        assert.equals(429, res.status, res.body)
        assert.equals("queue_full", res.json.code)
    end)

    it("hand a joining member its partitions: messages, each group's place, "
       .. "leases as redeliveries", function()
        local a = daemon.start({ db = true, env = env() })
        local b
        finally(function()
            a:stop()
            if b then b:stop() end
        end)
        await_live({ a }, 1, 5)
        local ids = fill(a, 20)
        b = daemon.start({ db = true, env = env() })
        await_live({ a, b }, 2, 10)
        local log = a:await_log("event=partitions_handed_over", 5)
        local moved = moved_from(a, 20)
        assert.truthy(log:find("messages=" .. 3 * #moved .. " dropped=0", 1,
                               true), log)
        assert.equals(3 * #moved, a:metric(HANDED))
        assert.equals(0, a:metric(WIPES("unplanned")))
        assert.equals(0, a:metric(WIPES("handover")))
        for _, part in ipairs(moved) do
            assert.equals(3, b:held("moving")[part], part)
        end
        -- The lease's ack at the old owner answers stale (through either
        -- broker: its id names a); g is given the message again, at the
        -- new owner, with the rest; h everything; neither twice.
        local part = moved[1]
        for _, d in ipairs({ a, b }) do
            local res = d:ack("moving", "g", { { ids[part], "completed" } })
            assert.equals(200, res.status, res.body)
            assert.equals("stale", res.json.results[1].outcome)
        end
        local got = pop_all(a, part, "g")
        assert.equals(3, #got)
        assert.same({ 1, 0, 0 }, { got[1].attempts, got[2].attempts,
                                   got[3].attempts })
        assert.same({ 1, 2, 3 }, { got[1].payload, got[2].payload,
                                   got[3].payload })
        assert.equals(0, #pop_all(b, part, "g"))
        assert.equals(3, #pop_all(b, part, "h"))
        local res = b:ack("moving", "g", { { got[1].id, "completed" } })
        assert.equals("acked", res.json.results[1].outcome)
    end)

    it("empty what cannot be handed over, count it, and its old ids answer "
       .. "stale", function()
        local a = daemon.start({ db = true, env = env({
            QUEEN_EPHEMERAL_HANDOVER_MAX_BYTES = "0" }) })
        local b
        finally(function()
            a:stop()
            if b then b:stop() end
        end)
        await_live({ a }, 1, 5)
        local ids = fill(a, 20)
        b = daemon.start({ db = true, env = env() })
        await_live({ a, b }, 2, 10)
        local log = a:await_log("event=partitions_handed_over", 5)
        local moved = moved_from(a, 20)
        assert.truthy(log:find("messages=0 dropped=" .. 3 * #moved, 1, true),
                      log)
        assert.equals(3 * #moved, a:metric(WIPES("handover")))
        assert.equals(0, a:metric(HANDED))
        for _, d in ipairs({ a, b }) do
            local res = d:ack("moving", "g", { { ids[moved[1]], "completed" } })
            assert.equals("stale", res.json.results[1].outcome)
        end
        -- b starts them empty, and serves them.
        assert.is_nil(b:held("moving")[moved[1]])
        assert.equals(201, a:push("moving", { "9" }, moved[1]).status)
        assert.equals(1, b:held("moving")[moved[1]])
    end)

    -- The soak's books, kept by a client of three brokers: every message
    -- pushed (answered 201) is acked exactly once; a 503 push is pushed
    -- again as a new message; a delivery whose ack does not answer acked is
    -- given again later (stale: its copy moved; a 503: its lease expires).
    local function traffic(ds, parts)
        local books = { pushed = {}, acked = {}, twice = 0, next = 1,
                        unsure = {}, answers = {} }
        local function count(status)
            books.answers[status] = (books.answers[status] or 0) + 1
        end
        local function try(d, f, ...)
            local ok, res = pcall(f, d, ...)
            if not ok then count("dead") return nil end
            count(res.status)
            return res
        end
        local function ack(d, msgs)
            local acks = {}
            for i, m in ipairs(msgs) do acks[i] = { m.id, "completed" } end
            local res = try(d, d.ack, "books", "g", acks)
            if not res or res.status ~= 200 then return end
            for i, r in ipairs(res.json.results) do
                local p = msgs[i].payload
                if r.outcome == "acked" then
                    if books.acked[p] then books.twice = books.twice + 1 end
                    books.acked[p] = true
                end
            end
        end
        function books.step(live)
            local d = live[math.random(#live)]
            local part = "b-" .. math.random(parts)
            local p = books.next
            books.next = p + 1
            local res = try(d, d.push, "books", { tostring(p) }, part)
            if res and res.status == 201 then books.pushed[p] = true
            elseif not res or res.json == nil
                    or res.json.code ~= "owner_moved" then
                -- Refused at the door, or relayed and maybe applied.
                books.unsure[p] = true
            end
            d = live[math.random(#live)]
            res = try(d, d.pop, "queue=books&group=g&batch=5&partition=b-"
                                .. math.random(parts))
            if res and res.status == 200 and #res.json.messages > 0 then
                ack(live[math.random(#live)], res.json.messages)
            end
        end
        -- Until everything pushed is acked, or seconds pass.
        function books.drain(live, seconds)
            local t0 = daemon.now()
            repeat
                local left = 0
                for p in pairs(books.pushed) do
                    if not books.acked[p] then left = left + 1 end
                end
                if left == 0 then return end
                for i = 1, parts do
                    local d = live[math.random(#live)]
                    local res = try(d, d.pop, "queue=books&group=g&batch=100"
                                              .. "&partition=b-" .. i)
                    if res and res.status == 200 and #res.json.messages > 0 then
                        ack(d, res.json.messages)
                    end
                end
                daemon.sleep(0.1)
            until daemon.now() - t0 > seconds
        end
        function books.report()
            local lost, pushed, phantom = 0, 0, 0
            for p in pairs(books.pushed) do
                pushed = pushed + 1
                if not books.acked[p] then lost = lost + 1 end
            end
            for p in pairs(books.acked) do
                if not books.pushed[p] and not books.unsure[p] then
                    phantom = phantom + 1
                end
            end
            return { pushed = pushed, lost = lost, twice = books.twice,
                     phantom = phantom }
        end
        return books
    end

    local function run_for(books, live, seconds)
        local t0 = daemon.now()
        while daemon.now() - t0 < seconds do books.step(live) end
    end

    -- A wait's failure message: what it waited for, every broker's cell
    -- view, and the log of the one it was about.
    local function seen(what, brokers, about)
        local views = {}
        for name, d in pairs(brokers) do views[name] = d:cell() end
        return what .. "; views " .. cjson.encode(views) .. "\n" .. about
               .. "'s log:\n" .. brokers[about]:read_log():sub(-4000)
    end

    local function wait_gone(d, seconds)
        local t0 = daemon.now()
        while d:alive() and daemon.now() - t0 < seconds do daemon.sleep(0.01) end
        assert.is_false(d:alive(), "did not stop")
        local log = d:read_log()
        d.stopped = true
        os.remove(d.log)
        return log
    end

    it("lose nothing when one broker of three stops under traffic and starts "
       .. "again", function()
        local e = env({ QUEEN_EPHEMERAL_LEASE_S = "1" })
        local ds = {}
        for i = 1, 3 do ds[i] = daemon.start({ db = true, env = e }) end
        finally(function() for _, d in ipairs(ds) do d:stop() end end)
        await_live(ds, 3, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        local books = traffic(ds, 12)
        run_for(books, { a, b, c }, 1)
        -- c holds some before it stops: waited for, as under ASan a second
        -- of traffic was once not enough (what each saw, for a failure).
        daemon.wait_until(function()
            return seen("c to hold partitions", { a = a, b = b, c = c }, "c")
        end, function()
            books.step({ a, b, c })
            return c:cell().partitions.held > 0
        end)
        os.execute("kill -TERM " .. c.pid)
        -- The client stops sending to c; a and b relay to it until its row
        -- is gone.
        local t0 = daemon.now()
        while c:alive() and daemon.now() - t0 < 10 do books.step({ a, b }) end
        local log = wait_gone(c, 1)
        assert.truthy(log:find("event=partitions_handed_over", 1, true), log)
        assert.truthy(log:find("dropped=0", 1, true), log)
        assert.truthy(log:find(" event=stopped\n", 1, true), log)
        await_live({ a, b }, 2, 10)
        run_for(books, { a, b }, 1)
        -- Every partition is held whole by one of a and b. (A partition
        -- that moved away keeps an empty ring where it was, for the fence:
        -- views flap under load, and each flap is a hand-over.)
        local ha, hb = a:held("books"), b:held("books")
        for i = 1, 12 do
            local part = "b-" .. i
            assert.is_false((ha[part] or 0) > 0 and (hb[part] or 0) > 0, part)
        end
        -- c again, a new member: a and b hand it its partitions back.
        local c2 = daemon.start({ db = true, env = e })
        ds[3] = c2
        t0 = daemon.now()
        while (a:cell().live ~= 3 or b:cell().live ~= 3)
                and daemon.now() - t0 < 10 do
            books.step({ a, b, c2 })
        end
        run_for(books, { a, b, c2 }, 1)
        for _, d in ipairs({ a, b }) do
            local l = d:read_log()
            if l:find("event=partitions_handed_over", 1, true) then
                assert.is_nil(l:find("dropped=[1-9]"), l)
            end
        end
        -- Its partitions come back (handed over, or pushed afresh) while
        -- the traffic goes on: waited for, as a loaded machine may take
        -- more than the second above.
        daemon.wait_until(function()
            return seen("c2 to own partitions again",
                        { a = a, b = b, c2 = c2 }, "c2")
        end, function()
            books.step({ a, b, c2 })
            return c2:cell().partitions.owned > 0
        end)
        books.drain({ a, b, c2 }, 10)
        local r = books.report()
        assert.is_true(r.pushed > 100, r.pushed .. " pushed")
        assert.same({ pushed = r.pushed, lost = 0, twice = 0, phantom = 0 }, r)
        for _, d in ipairs({ a, b, c2 }) do
            assert.equals(0, d:metric(WIPES("unplanned")))
            assert.equals(0, d:metric(WIPES("handover")))
        end
    end)

    it("lose nothing when a stopped broker starts again on its address "
       .. "before the others read it gone: the partitions they were just "
       .. "handed go on to it", function()
        -- A read a second apart: the old row's delete and the new one's
        -- insert land between two reads of a survivor.
        local e = env({ QUEEN_EPHEMERAL_LEASE_S = "1",
                        QUEEN_EPHEMERAL_MEMBER_TTL_MS = "4000" })
        local ds = {}
        for i = 1, 3 do ds[i] = daemon.start({ db = true, env = e }) end
        finally(function() for _, d in ipairs(ds) do d:stop() end end)
        await_live(ds, 3, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        local books = traffic(ds, 16)
        run_for(books, { a, b, c }, 1)
        os.execute("kill -TERM " .. c.pid)
        while c:alive() do books.step({ a, b }) end
        wait_gone(c, 1)
        local c2 = daemon.start({ db = true, env = e, port = c.port })
        ds[3] = c2
        local t0 = daemon.now()
        while (a:cell().live ~= 3 or b:cell().live ~= 3)
                and daemon.now() - t0 < 10 do
            books.step({ a, b, c2 })
        end
        run_for(books, { a, b, c2 }, 1)
        books.drain({ a, b, c2 }, 10)
        local r = books.report()
        assert.is_true(r.pushed > 100, r.pushed .. " pushed")
        assert.same({ pushed = r.pushed, lost = 0, twice = 0, phantom = 0 }, r)
        for _, d in ipairs({ a, b, c2 }) do
            assert.is_nil(d:read_log():find("event=partitions_wiped", 1, true))
            assert.equals(0, d:metric(WIPES("unplanned")))
            assert.equals(0, d:metric(WIPES("handover")))
        end
    end)

    it("free nothing at a new owner before it knows the partition's groups: "
       .. "a group that read nothing reads everything after a join",
       function()
        local e = env()
        local a = daemon.start({ db = true, env = e })
        local b = daemon.start({ db = true, env = e })
        local ds = { a, b }
        finally(function() for _, d in ipairs(ds) do d:stop() end end)
        await_live(ds, 2, 10)
        -- g1 and g2 know all 16 partitions, which hold nothing yet.
        for i = 1, 16 do
            for _, g in ipairs({ "g1", "g2" }) do
                local res = a:pop("queue=groups&group=" .. g
                                  .. "&partition=q-" .. i)
                assert.equals(200, res.status, res.body)
            end
        end
        local c = daemon.start({ db = true, env = e })
        ds[3] = c
        await_live(ds, 3, 10)
        -- Pushed through a broker that sees c, at once; g2 reads and acks
        -- all of it through c, and g1 nothing yet.
        for i = 1, 16 do
            assert.equals(201, a:push("groups", { tostring(i) }, "q-" .. i)
                                   .status)
        end
        for i = 1, 16 do
            local res = c:pop("queue=groups&group=g2&batch=10&partition=q-"
                              .. i)
            assert.equals(200, res.status, res.body)
            assert.equals(1, #res.json.messages, "q-" .. i)
            local acked = c:ack("groups", "g2",
                                { { res.json.messages[1].id, "completed" } })
            assert.equals("acked", acked.json.results[1].outcome)
        end
        assert.is_true(c:cell().partitions.owned > 0)
        local got = {}
        for i = 1, 16 do
            local res = b:pop("queue=groups&group=g1&batch=10&partition=q-"
                              .. i)
            assert.equals(200, res.status, res.body)
            for _, m in ipairs(res.json.messages) do got[#got + 1] = m.payload end
        end
        assert.equals(16, #got)
    end)

    it("try a failed hand-over again until its timeout: a receiver "
       .. "listening only after 1.5 s still gets the partition", function()
        local e = env({ QUEEN_EPHEMERAL_HANDOVER_TIMEOUT_MS = "5000" })
        local a = daemon.start({ db = true, env = e })
        local ds = { a }
        local fake
        finally(function()
            if fake then os.execute("kill " .. fake) end
            for _, d in ipairs(ds) do d:stop() end
        end)
        for i = 1, 16 do
            assert.equals(201, a:push("late", { tostring(i) }, "l-" .. i).status)
        end
        -- A member whose row is there before it listens: a hands it its
        -- partitions, which fail to connect until a broker starts there.
        local port = daemon.free_port()
        local id = "f00000000000000e"
        -- It answers the readiness probe (a places nothing on a member
        -- that does not), then stops listening.
        local server = assert(socket.bind("127.0.0.1", port))
        daemon.member_row(TOKEN, id, "http://127.0.0.1:" .. port, 4022250975,
                          600000)
        daemon.answer_ready(server, id, 4022250975, function()
            return a:cell().live == 2
        end)
        server:close()
        daemon.wait_until("a to fail a hand-over", function()
            return a:read_log():find("event=handover_failed", 1, true)
        end)
        daemon.sleep(1.5) -- the receiver's delay, not a wait for a state
        daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '" .. id
                   .. "'")
        local b = daemon.start({ db = true, env = e, port = port })
        ds[2] = b
        -- b is a new member, not the one a sent to: b takes what its own
        -- view gives it and answers owner_moved for the rest, which a
        -- keeps once it reads the cell as b sees it.
        daemon.wait_until("a to be done with its hand-overs", function()
            return a:read_log():find("event=partitions_handed_over", 1, true)
        end, 10)
        local total = 0
        for _, d in ipairs(ds) do
            for _, n in pairs(d:held("late")) do total = total + n end
        end
        assert.equals(16, total)
        assert.equals(0, a:metric(WIPES("handover")))
    end)

    it("answer ephemeral_forward_failed for a killed broker's partitions "
       .. "until its TTL, then serve them; nothing else is touched",
       function()
        local ds = {}
        -- Pushes for 3 s into one queue: room for them all, the bound
        -- being the queue's on each broker.
        local roomy = env({ QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "10000000" })
        for i = 1, 3 do ds[i] = daemon.start({ db = true, env = roomy }) end
        finally(function() for _, d in ipairs(ds) do d:stop() end end)
        await_live(ds, 3, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        -- Which partitions b owns: pushed through a, they land on b.
        local of_b, ids = {}, {}
        for i = 1, 24 do
            local part = "k-" .. i
            assert.equals(201, a:push("killed", { "1" }, part).status)
        end
        for p in pairs(b:held("killed")) do
            of_b[p] = true
            local res = a:pop("queue=killed&partition=" .. p)
            ids[#ids + 1] = res.json.messages[1].id
        end
        assert.is_true(#ids > 0)
        local idb = b:cell().self.id
        os.execute("kill -KILL " .. b.pid)
        b.stopped = true
        os.remove(b.log)
        local t0 = daemon.now()
        local failed, served_after = 0, nil
        while daemon.now() - t0 < 3 do
            for i = 1, 24 do
                local part = "k-" .. i
                local s = daemon.now()
                local res = (i % 2 == 0 and a or c):push("killed", { "2" },
                                                         part)
                -- No request waits past the relay's deadline.
                assert.is_true(daemon.now() - s < 5.5)
                if of_b[part] then
                    if res.status == 503 then
                        -- owner_moved: for a heartbeat, a and c disagree
                        -- on whether b is still there.
                        if res.json.code == "ephemeral_forward_failed" then
                            failed = failed + 1
                        else
                            assert.equals("owner_moved", res.json.code)
                        end
                    else
                        assert.equals(201, res.status, res.body)
                        served_after = served_after or daemon.now() - t0
                    end
                else
                    assert.equals(201, res.status, res.body)
                end
            end
        end
        assert.is_true(failed > 0)
        assert.truthy(served_after, "never served by a new owner")
        for i = 1, 24 do
            for _, d in ipairs({ a, c }) do
                assert.equals(201, d:push("killed", { "3" }, "k-" .. i).status)
            end
        end
        -- The killed incarnation's ids answer stale by their epoch.
        local res = a:ack("killed", nil, { { ids[1], "completed" } })
        assert.equals("stale", res.json.results[1].outcome)
        daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                   .. idb .. "'")
    end)
    it("ship a pending hand-over ahead of a request relayed for its "
       .. "partition", function()
        daemon.sql("DELETE FROM queen.ephemeral_members")
        -- Nothing times out while the test looks.
        local e = env({ QUEEN_EPHEMERAL_HANDOVER_TIMEOUT_MS = "60000" })
        local a = daemon.start({ db = true, env = e })
        local ds, fake = { a }, nil
        local fid = "f00000000000003f"
        finally(function()
            daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                       .. fid .. "'")
            if fake then os.execute("kill " .. fake) end
            for _, d in ipairs(ds) do d:stop() end
        end)
        local ida = a:cell().self.id
        local N = 40
        for i = 1, N do
            assert.equals(201, a:push("ahead", { '"m-' .. i .. '"' },
                                      "p-" .. i).status)
        end
        -- A member that never answers: a's hand-overs to it fill the
        -- window (4 in flight for ever), and every later one waits in
        -- line behind them.
        fake = silent_member(fid, 4022250976)
        local two = { ida, fid }
        daemon.wait_until("a to hand f its partitions", function()
            if a:cell().live ~= 2 then return false end
            local held = a:held("ahead")
            for i = 1, N do
                local p = "p-" .. i
                local mine = owner(two, "ahead", p) == ida
                if ((held[p] or 0) > 0) ~= mine then return false end
            end
            return true
        end, 10)
        -- b joins: a's partitions it takes queue behind f's.
        local b = daemon.start({ db = true, env = e })
        ds[2] = b
        local idb = b:cell().self.id
        await_live({ a, b }, 3, 10)
        local three = { ida, idb, fid }
        local to_b = {}
        for i = 1, N do
            local p = "p-" .. i
            if owner(two, "ahead", p) == ida
               and owner(three, "ahead", p) == idb then
                to_b[#to_b + 1] = p
            end
        end
        assert.is_true(#to_b >= 2, #to_b .. " partitions move from a to b")
        daemon.wait_until("a to let b's partitions go", function()
            local held = a:held("ahead")
            for _, p in ipairs(to_b) do
                if (held[p] or 0) > 0 then return false end
            end
            return true
        end, 10)
        for _, p in ipairs(to_b) do
            assert.is_nil(b:held("ahead")[p], p .. " reached b already")
        end
        -- A pop for one of them through a: its hand-over goes first, and
        -- the pop, relayed to b, finds its message (waiting, in case b
        -- reads the pop before the hand-over on another connection).
        local p = to_b[1]
        local i = p:match("%d+")
        local res = a:pop("queue=ahead&group=g&wait=true&timeout=3000"
                          .. "&partition=" .. p)
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages, res.body)
        assert.equals("m-" .. i, res.json.messages[1].payload)
        -- Only that one was shipped: the others still wait behind f's.
        for k = 2, #to_b do
            assert.is_nil(b:held("ahead")[to_b[k]], to_b[k] .. " reached b")
        end
    end)
end)
