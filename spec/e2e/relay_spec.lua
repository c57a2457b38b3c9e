-- The cell's relay (docs/cell.md): a push landing on a broker that does
-- not own its partition is relayed once to the owner with the forward mark,
-- which only the cell token makes trusted; an owner that is gone is
-- ephemeral_forward_failed until its TTL passes, then another serves.
local daemon = require("e2e.daemon")
local helper = require("helper")
local mark = require("e2e.mark")

local TOKEN = "relay-spec-cell-token-0123456789"
local TTL = "400"
local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = TTL,
              QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN }
local TENANT = "00000000-0000-0000-0000-000000000001"

-- A partition of queue that owner holds, found by pushing one message at
-- a time through via: its name.
local function partition_on(via, owner, queue, tries)
    for i = 1, tries or 60 do
        local part = "p-" .. i
        assert.equals(201, via:push(queue, { "1" }, part).status)
        if owner:held(queue)[part] then return part end
    end
    error("no partition of " .. queue .. " landed on the owner")
end

-- The epoch a message id carries (e:<epoch>:<partition>:<seq>).
local function epoch_of(id)
    return assert(id:match("^e:(%x+):"), id)
end

local function quote(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function start(n, env)
    return daemon.start_cell(n, env or ENV)
end

-- The bytes d's kernel holds that d has not read, over its established
-- connections (/proc/net/tcp): what reached a broker that is stopped.
-- Starts spec/e2e/fake_member.lua (moved) as member id of epoch, a member whose
-- row is signed and which answers the readiness probe, and which leaves
-- the cell (its row deleted) at the first request it is sent, until each
-- of brokers sees `live` members. Returns its pid.
local function moved_owner(id, epoch, live, brokers)
    local port = daemon.free_port()
    local leave = "psql " .. quote(daemon.database_url) .. " -XAtq -c "
        .. quote("DELETE FROM queen.ephemeral_members WHERE id = '" .. id
                 .. "'")
    local urls = {}
    for i, d in ipairs(brokers) do urls[i] = "http://127.0.0.1:" .. d.port end
    local p = io.popen(("luajit %s/spec/e2e/fake_member.lua moved %d %s %d %s %d "
                        .. "%s >/dev/null 2>&1 & echo $!")
                       :format(helper.root, port, id, epoch, quote(leave),
                               live, table.concat(urls, " ")))
    local pid = p:read("*l")
    p:close()
    daemon.member_row(TOKEN, id, "http://127.0.0.1:" .. port, epoch, 600000)
    return pid
end

-- The bytes d's kernel holds unread, by established connection (its
-- remote end): what a stopped broker has been sent.
local function unread_at(d)
    local port, by = (":%04X"):format(d.port), {}
    for line in io.lines("/proc/net/tcp") do
        local here, there, st, rx = line:match("^%s*%d+: %x+(:%x+) "
                                               .. "(%x+:%x+) (%x+) %x+:(%x+)")
        if here == port and st == "01" then by[there] = tonumber(rx, 16) end
    end
    return by
end

-- Whether some connection holds more unread than it did in before: a
-- connection reset meanwhile (an abandoned relay's) takes its bytes away,
-- so totals would not say.
local function more_unread(d, before)
    for there, n in pairs(unread_at(d)) do
        if n > (before[there] or 0) then return true end
    end
    return false
end

describe("the relay", function()
    it("holds every partition's messages on its owner, whichever broker "
       .. "they were pushed to", function()
        local ds = start(3)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a = ds[1]
        for i = 1, 30 do
            local res = a:push("rooms", { "1", "2" }, "room-" .. i)
            assert.equals(201, res.status, res.body)
            assert.equals(2, res.json.pushed)
        end
        -- Each status read shows only its own broker's partitions: together
        -- every one, each once, two messages each, and all owned there.
        local seen, owners = {}, 0
        for _, d in ipairs(ds) do
            local mine = d:held("rooms")
            local n = 0
            for p, pending in pairs(mine) do
                assert.is_nil(seen[p], p .. " is held twice")
                assert.equals(2, pending)
                seen[p] = true
                n = n + 1
            end
            local v = d:cell()
            assert.equals(v.partitions.held, v.partitions.owned)
            -- The listing too counts only this broker's partitions.
            local listed = { partitions = 0, depth = 0 }
            for _, q in ipairs(d:request("GET", "/api/v1/ephemeral/queues")
                                .json.queues) do
                if q.queue == "rooms" then listed = q end
            end
            assert.equals(n, listed.partitions)
            assert.equals(2 * n, listed.depth)
            if n > 0 then owners = owners + 1 end
        end
        for i = 1, 30 do assert.is_true(seen["room-" .. i], "room-" .. i) end
        assert.equals(3, owners)
        -- a relayed exactly the pushes of the partitions it does not own.
        local own = 0
        for _ in pairs(a:held("rooms")) do own = own + 1 end
        assert.equals(30 - own,
                      a:metric('queen_ephemeral_forwarded_total{route="push",'
                                .. 'outcome="answered"} (%d+)'))
    end)

    it("trusts a forward mark only on a connection a session signed with "
       .. "the cell token for this broker and now opened, once", function()
        local ds = start(2)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local PATH = "/api/v1/ephemeral/push"
        local body = '{"queue":"forged","messages":[{"payload":1}]}'
        local HERE = "127.0.0.1:" .. a.port
        local function push(headers)
            headers["Content-Type"] = "application/json"
            return a:request("POST", PATH, body, headers)
        end
        local function refused(res, what)
            assert.equals(401, res.status, what)
            assert.equals("unauthorized", res.json.code)
            assert.truthy(res.json.error:find("token", 1, true), res.body)
        end
        local now = math.floor(daemon.now() * 1000)
        -- A mark alone, whatever it holds (the raw token, as marks were
        -- written before they were signed; a signed mark of the old form).
        for _, m in ipairs({ TOKEN .. " " .. TENANT, TENANT, TOKEN }) do
            refused(push({ Host = HERE, ["X-Queen-Forward"] = m }), m)
        end
        -- A session signed with another key, too old or too far ahead, or
        -- for another broker (b's, sent to a as b, or as a).
        for what, session in pairs({
            key = mark.session("wrong-token-wrong-token-01234567", HERE),
            old = mark.session(TOKEN, HERE, now - 31000),
            ahead = mark.session(TOKEN, HERE, now + 31000),
            other = mark.session(TOKEN, "127.0.0.1:" .. b.port),
        }) do
            refused(push(mark.headers(TOKEN, a, TENANT,
                                      { session = session })), what)
        end
        local as_b = mark.headers(TOKEN, a, TENANT)
        as_b.Host = "127.0.0.1:" .. b.port
        as_b["X-Queen-Session"] = mark.session(TOKEN, as_b.Host)
        refused(push(as_b), "b's session, sent to a")
        -- Opened, a session's tenant must be one an edge writes: a
        -- lowercase UUID.
        for _, tenant in ipairs({ "tenant-a",
                                  "0000000A-0000-0000-0000-00000000000B",
                                  TENANT .. "0" }) do
            local res = push(mark.headers(TOKEN, a, tenant))
            assert.equals(401, res.status, tenant)
            assert.equals("the forward mark's tenant must be a lowercase UUID",
                          res.json.error)
        end
        assert.equals(404, a:depth("forged").status)
        -- A session opens its connection for the member: the mark stands
        -- for identity, grant and rate there, request after request.
        local session = mark.session(TOKEN, HERE)
        local c = a:connect()
        local first = c:request("POST", PATH, body,
                                mark.headers(TOKEN, a, TENANT,
                                             { session = session }))
        assert.is_true(first.status == 201 or (first.status == 503
                       and first.json.code == "owner_moved"), first.body)
        local again = c:request("POST", PATH, body,
                                { Host = HERE, ["X-Queen-Forward"] = TENANT })
        assert.equals(first.status, again.status, again.body)
        c:close()
        -- Read off the wire, the same session opens nothing again.
        refused(push(mark.headers(TOKEN, a, TENANT, { session = session })),
                "a session replayed")
    end)

    it("reads a relayed push's scan frame only from a member, and a "
       .. "frame that is not one of the body not at all", function()
        local ds = start(1)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a = ds[1]
        local PATH = "/api/v1/ephemeral/push"
        -- The frame an edge writes for it is "10:1 26:1 52:3"; this one
        -- says the payload is the partition's name, and no partition.
        local body = '{"queue":"q","partition":"p","messages":'
                     .. '[{"payload":123}]}'
        local lie = "10:1 - 25:3"
        local function payloads(partition)
            local res = a:pop("queue=q&partition=" .. partition .. "&batch=10")
            assert.equals(200, res.status, res.body)
            local out = {}
            for i, m in ipairs(res.json.messages) do out[i] = m.payload end
            return out
        end
        -- A client's frame is never read: the body is scanned.
        local res = a:request("POST", PATH, body,
                              { ["Content-Type"] = "application/json",
                                ["X-Queen-Scan"] = lie })
        assert.equals(201, res.status, res.body)
        assert.same({ 123 }, payloads("p"))
        -- Nor a member's that does not fit the body (a span past its end).
        local c = a:connect()
        local h = mark.headers(TOKEN, a, TENANT,
                               { extra = { ["Content-Type"] = "application/json",
                                           ["X-Queen-Scan"] = "10:1 - 52:99" } })
        res = c:request("POST", PATH, body, h)
        assert.equals(201, res.status, res.body)
        assert.same({ 123 }, payloads("p"))
        -- A member's is believed, as its mark is: what the frame names is
        -- what is stored.
        res = c:request("POST", PATH, body,
                        { ["Content-Type"] = "application/json",
                          ["X-Queen-Forward"] = TENANT, ["X-Queen-Scan"] = lie,
                          Host = "127.0.0.1:" .. a.port })
        assert.equals(201, res.status, res.body)
        c:close()
        assert.same({ "p" }, payloads("Default"))
    end)

    it("refuses any mark at a broker without a cell token", function()
        local a = daemon.start()
        finally(function() a:stop() end)
        local body = '{"queue":"q","messages":[{"payload":1}]}'
        local h = mark.headers(TOKEN, a, TENANT)
        h["Content-Type"] = "application/json"
        local res = a:request("POST", "/api/v1/ephemeral/push", body, h)
        assert.equals(401, res.status)
        assert.equals("unauthorized", res.json.code)
    end)

    it("answers owner_moved to a marked push for a partition it does not "
       .. "own, and relays it no further", function()
        local ds = start(2)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        -- Find a partition b owns: pushed through a, it lands on b.
        local part
        for i = 1, 40 do
            a:push("moved", { "1" }, "p-" .. i)
            if b:held("moved")["p-" .. i] then
                part = "p-" .. i
                break
            end
        end
        assert.truthy(part)
        local body = '{"queue":"moved","partition":"' .. part
                     .. '","messages":[{"payload":1}]}'
        local h = mark.headers(TOKEN, a, TENANT)
        h["Content-Type"] = "application/json"
        local res = a:request("POST", "/api/v1/ephemeral/push", body, h)
        assert.equals(503, res.status, res.body)
        assert.equals("owner_moved", res.json.code)
        assert.equals("1", res.headers["retry-after"])
        assert.equals(1, b:held("moved")[part])
        assert.equals(1, a:metric('queen_ephemeral_forwarded_total{route='
                                   .. '"push",outcome="owner_moved"} (%d+)'))
    end)

    it("relays a pop naming its partition to the owner, its ack to the "
       .. "broker its id names, and a wait=true pop parks at the owner until "
       .. "a push through a third broker wakes it",
       function()
        local ds = start(3)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        local part
        for i = 1, 60 do
            a:push("popped", { "1" }, "p-" .. i)
            if b:held("popped")["p-" .. i] then
                part = "p-" .. i
                break
            end
        end
        assert.truthy(part)
        local res = a:pop("queue=popped&partition=" .. part .. "&batch=10")
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages)
        -- From b: a never held the partition, a pop through it made none.
        assert.is_nil(a:held("popped")[part])
        -- Its ack, through c, goes to b: the id's epoch names b.
        local id = res.json.messages[1].id
        local acked = c:ack("popped", nil, { { id, "completed" } })
        assert.equals(200, acked.status, acked.body)
        assert.same({ { id = id, outcome = "acked" } }, acked.json.results)
        -- Freed once b knows no hand-over can bring it groups (the cell just
        -- formed: docs/cell.md, "Moves").
        daemon.wait_until("b to free the acked message", function()
            return b:held("popped")[part] == 0
        end)
        -- The long poll: parked at b through a, woken by a push through c.
        local conn = a:connect()
        conn:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=popped"
                                .. "&partition=" .. part
                                .. "&wait=true&timeout=5000"))
        b:await_parked(1)
        local t0 = daemon.now()
        assert.equals(201, c:push("popped", { "42" }, part).status)
        res = assert(conn:receive(6))
        conn:close()
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages)
        assert.equals(42, res.json.messages[1].payload)
        assert.is_true(daemon.now() - t0 < 2, "woken late")
        assert.equals(2, a:metric('queen_ephemeral_forwarded_total{route='
                                   .. '"pop",outcome="answered"} (%d+)'))
        assert.equals(1, c:metric('queen_ephemeral_forwarded_total{route='
                                   .. '"ack",outcome="answered"} (%d+)'))
    end)

    it("commits a relayed pop on delivery under either name, and the owner "
       .. "ignores what it does not know", function()
        local ds = start(2)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local part = partition_on(a, b, "cod")
        assert.equals(201, a:push("cod", { "2" }, part).status)
        for _, flag in ipairs({ "commitOnDelivery=true", "autoAck=yes" }) do
            local res = a:pop("queue=cod&partition=" .. part .. "&group=g&"
                              .. flag .. "&sdkVersion=9")
            assert.equals(200, res.status, res.body)
            assert.equals(1, #res.json.messages, flag)
            local ack = a:ack("cod", "g", { { res.json.messages[1].id } })
            assert.equals("unknown", ack.json.results[1].outcome, flag)
        end
        assert.same({}, a:pop("queue=cod&partition=" .. part
                              .. "&group=g").json.messages)
        assert.equals(3, a:metric('queen_ephemeral_forwarded_total{route='
                                  .. '"pop",outcome="answered"} (%d+)'))
    end)

    it("stops a relayed pop's batch at a body's bytes, so its answer fits "
       .. "the edge's relay and no autoAck'd message is lost", function()
        -- Ten 3,000-byte payloads on b, popped through a in batches of 10
        -- under a 4,096-byte body limit: a whole batch (30 KB) is past
        -- what a's relay accepts, and b had taken (and acked) it before
        -- a refused it.
        local env = { QUEEN_EPHEMERAL_MAX_BODY_BYTES = "4096",
                      QUEEN_EPHEMERAL_MAX_HEADER_BYTES = "2048" }
        for k, v in pairs(ENV) do env[k] = v end
        daemon.forget_declarations() -- an earlier run's bound of "tight"
        local ds = start(2, env)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local part = partition_on(a, b, "big")
        local payload = '"' .. ("x"):rep(3000) .. '"'
        for _ = 1, 10 do
            assert.equals(201, a:request("POST", "/api/v1/ephemeral/push",
                '{"queue":"big","partition":"' .. part .. '","messages":'
                .. '[{"payload":' .. payload .. '}]}').status)
        end
        local got, answers = 0, 0
        while got < 11 and answers < 20 do
            local res = a:pop("queue=big&partition=" .. part
                              .. "&batch=10&autoAck=true")
            assert.equals(200, res.status, res.body)
            if #res.json.messages == 0 then break end
            assert.is_true(#res.json.messages < 10)
            got, answers = got + #res.json.messages, answers + 1
        end
        -- The one partition_on pushed, and the ten: each exactly once.
        assert.equals(11, got)
        assert.equals(0, a:metric('queen_ephemeral_forwarded_total{route='
                                  .. '"pop",outcome="failed"} (%d+)'))
    end)

    -- A direct push that a later rung refuses gives its rate back, so a
    -- producer retrying against queue_full (a 429 whose contract is "wait
    -- and retry and you get in") is not turned into rate_limited; a push
    -- relayed to the owner is the same push.
    it("parks a relayed waiting pop at its owner for the edge's timeout "
       .. "when it names none", function()
        -- The edge waits 0.5 s by default, the owner 30 s: the owner must
        -- answer within the edge's deadline (its timeout + 2 s), not
        -- after its own default.
        local short = { QUEEN_EPHEMERAL_POP_TIMEOUT_MS = "500" }
        for k, v in pairs(ENV) do short[k] = v end
        local a = daemon.start({ db = true, env = short })
        local b = daemon.start({ db = true, env = ENV })
        finally(function() daemon.stop_all({ a, b }) end)
        daemon.await_cell({ a, b }, 10)
        local part = partition_on(a, b, "patient")
        -- What finding the partition pushed is taken first.
        local taken = a:pop("queue=patient&partition=" .. part
                            .. "&group=late&batch=100&autoAck=true")
        assert.equals(200, taken.status, taken.body)
        local t0 = daemon.now()
        local res = a:pop("queue=patient&partition=" .. part
                          .. "&group=late&wait=true")
        local took = daemon.now() - t0
        assert.equals(200, res.status, res.body)
        assert.same({}, res.json.messages)
        assert.is_true(took >= 0.4 and took < 2, "answered after " .. took)
    end)

    it("gives the rate back when the owner refuses a relayed push",
       function()
        local env = { QUEEN_EPHEMERAL_RATE = "3", QUEEN_EPHEMERAL_BURST = "3" }
        for k, v in pairs(ENV) do env[k] = v end
        daemon.forget_declarations() -- an earlier run's bound of "tight"
        local ds = start(2, env)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local part
        for i = 1, 40 do
            part = "p-" .. i
            local res = b:push("tight", { "1" }, part)
            assert.equals(201, res.status, res.body)
            if b:held("tight")[part] then break end
            part = nil
            daemon.sleep(0.4) -- the bucket refills: 3 a second
        end
        assert.truthy(part, "b owned no partition")
        -- Bounded only now: the bound is the queue's on each broker, and
        -- a's share took the pushes before b's partition was found.
        local cfg = b:request("POST", "/api/v1/ephemeral/configure",
                              '{"queue":"tight","options":{"maxLength":1}}')
        assert.equals(201, cfg.status, cfg.body)
        daemon.sleep(1.1)
        for _, d in ipairs({ b, a }) do
            for i = 1, 6 do
                local res = d:push("tight", { "2" }, part)
                assert.equals(429, res.status, res.body)
                assert.equals("queue_full", res.json.code,
                              d.port .. " push " .. i .. ": " .. res.body)
            end
        end
    end)

    it("answers ephemeral_forward_failed while a killed owner is within its "
       .. "TTL, then serves from the new owner", function()
        local ds = start(3)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        local part
        for i = 1, 60 do
            a:push("dies", { "1" }, "p-" .. i)
            if b:held("dies")["p-" .. i] then
                part = "p-" .. i
                break
            end
        end
        assert.truthy(part)
        local idb = b:cell().self.id
        os.execute("kill -KILL " .. b.pid)
        b.stopped = true
        os.remove(b.log)
        local t0 = daemon.now()
        local res = a:push("dies", { "2" }, part)
        assert.equals(503, res.status, res.body)
        assert.equals("ephemeral_forward_failed", res.json.code)
        assert.equals("1", res.headers["retry-after"])
        -- Past the TTL, a or c owns it, and the push is served there.
        repeat
            daemon.sleep(0.1)
            res = a:push("dies", { "3" }, part)
        until res.status == 201 or daemon.now() - t0 > 5
        assert.equals(201, res.status, res.body)
        -- Not before the TTL, less a heartbeat (b's last beat may be up to
        -- TTL / 4 before its death) and some slack.
        local waited = daemon.now() - t0
        assert.is_true(waited >= tonumber(TTL) / 1000 / 2,
                       "served after " .. waited .. " s")
        local there = (a:held("dies")[part] or 0) + (c:held("dies")[part] or 0)
        assert.equals(1, there)
        assert.is_true(a:metric('queen_ephemeral_forwarded_total{route='
                                 .. '"push",outcome="failed"} (%d+)') >= 1)
        daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                   .. idb .. "'")
    end)
    it("pushes on A, pops on B and acks on C: one ack over three holders, "
       .. "split by holder and merged in the request's order", function()
        local ds = start(3)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        for i = 1, 30 do
            assert.equals(201, a:push("trip", { tostring(i) }, "p-" .. i).status)
        end
        local acks, epochs, n = {}, {}, 0
        for i = 30, 1, -1 do
            local res = b:pop("queue=trip&partition=p-" .. i .. "&batch=10")
            assert.equals(200, res.status, res.body)
            assert.equals(1, #res.json.messages)
            local id = res.json.messages[1].id
            acks[#acks + 1] = { id, "completed" }
            if not epochs[epoch_of(id)] then n = n + 1 end
            epochs[epoch_of(id)] = true
        end
        assert.equals(3, n)
        local res = c:ack("trip", nil, acks)
        assert.equals(200, res.status, res.body)
        assert.equals(30, #res.json.results)
        for i, r in ipairs(res.json.results) do
            assert.same({ id = acks[i][1], outcome = "acked" }, r)
        end
        for _, d in ipairs(ds) do
            daemon.wait_until("every acked message freed", function()
                for _, held in pairs(d:held("trip")) do
                    if held > 0 then return false end
                end
                return true
            end)
        end
        -- c settled its own ids and sent one part to each of a and b.
        assert.equals(2, c:metric('queen_ephemeral_forwarded_total{route='
                                   .. '"ack",outcome="answered"} (%d+)'))
    end)

    it("answers stale for the ids of an ack part whose holder cannot be "
       .. "reached, settles the rest, and 503s an ack that reached none",
       function()
        -- A TTL long enough that the killed broker stays in every view.
        local ds = start(3, { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "5000",
                              QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN })
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        local ids = {}
        for _, d in ipairs(ds) do
            local part = partition_on(a, d, "gone")
            assert.equals(201, a:push("gone", { "2", "3" }, part).status)
            local res = a:pop("queue=gone&partition=" .. part .. "&batch=10")
            assert.equals(200, res.status, res.body)
            ids[d] = {}
            for _, m in ipairs(res.json.messages) do
                ids[d][#ids[d] + 1] = m.id
            end
        end
        local idc = c:cell().self.id
        os.execute("kill -KILL " .. c.pid)
        c.stopped = true
        os.remove(c.log)
        local order = { { ids[c][1], "stale" }, { ids[a][1], "acked" },
                        { ids[b][1], "acked" }, { ids[c][2], "stale" } }
        local acks = {}
        for i, o in ipairs(order) do acks[i] = { o[1], "completed" } end
        local res = a:ack("gone", nil, acks)
        assert.equals(200, res.status, res.body)
        for i, r in ipairs(res.json.results) do
            assert.same({ id = order[i][1], outcome = order[i][2] }, r)
        end
        assert.equals(#order, #res.json.results)
        -- Nothing of it here, and its one holder gone: retry the whole.
        res = b:ack("gone", nil, { { ids[c][3], "completed" } })
        assert.equals(503, res.status, res.body)
        assert.equals("ephemeral_forward_failed", res.json.code)
        daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                   .. idc .. "'")
    end)
    it("serves a pop naming no partition from another member's "
       .. "partitions, holding nothing here, and wakes a waiting one there "
       .. "(whole_pop_spec has the rest)", function()
        local ds = start(3)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a = ds[1]
        assert.equals(201, a:push("whole", { "7" }).status)
        local owner, others = nil, {}
        for _, d in ipairs(ds) do
            if d:held("whole").Default then owner = d
            else others[#others + 1] = d end
        end
        assert.truthy(owner)
        local x, y = others[1], others[2]
        local res = x:pop("queue=whole&batch=10")
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages)
        assert.equals("Default", res.json.messages[1].partition)
        assert.equals(7, res.json.messages[1].payload)
        -- Taken at the owner: nothing is held here or at y, which know
        -- the queue and its group (queue mode's), as the pop's
        -- announcement made them (docs/cell.md, "A queue's groups").
        for _, d in ipairs({ x, y }) do
            local depth = daemon.wait_until("the queue's group at :" .. d.port,
                function()
                    local r = d:depth("whole")
                    return r.status == 200 and #r.json.groups == 1 and r.json
                end)
            assert.equals(0, depth.pending)
            assert.equals(0, #depth.partitions)
            assert.equals("__QUEUE_MODE__", depth.groups[1].group)
        end
        -- Waiting, it waits at the owner too; a push through y wakes it.
        local conn = x:connect()
        conn:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=whole"
                                .. "&wait=true&timeout=5000"))
        owner:await_parked(1)
        local t0 = daemon.now()
        assert.equals(201, y:push("whole", { "8" }).status)
        res = assert(conn:receive(6))
        conn:close()
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages)
        assert.equals(8, res.json.messages[1].payload)
        assert.is_true(daemon.now() - t0 < 2, "woken late")
    end)
    it("serves two groups through different brokers, each receiving "
       .. "everything", function()
        local ds = start(3)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b, c = ds[1], ds[2], ds[3]
        local expected = {}
        for i = 1, 20 do
            assert.equals(201, a:push("fan", { i, 100 + i }, "p-" .. i).status)
            expected[#expected + 1] = i
            expected[#expected + 1] = 100 + i
        end
        table.sort(expected)
        -- Each group pops every partition through its broker (both before
        -- either acks: a ring keeps a message until every group it has
        -- took it), then acks what it got in one ack through another.
        local function drain(via, group)
            local got, acks = {}, {}
            for i = 1, 20 do
                local res = via:pop("queue=fan&group=" .. group
                                    .. "&partition=p-" .. i .. "&batch=10")
                assert.equals(200, res.status, res.body)
                for _, m in ipairs(res.json.messages) do
                    got[#got + 1] = m.payload
                    acks[#acks + 1] = { m.id, "completed" }
                end
            end
            table.sort(got)
            assert.same(expected, got)
            return acks
        end
        local function settle(via, group, acks)
            local res = via:ack("fan", group, acks)
            assert.equals(200, res.status, res.body)
            assert.equals(#acks, #res.json.results)
            for _, r in ipairs(res.json.results) do
                assert.equals("acked", r.outcome, r.id)
            end
        end
        local g1, g2 = drain(b, "g1"), drain(c, "g2")
        settle(c, "g1", g1)
        settle(a, "g2", g2)
        for _, d in ipairs(ds) do
            for _, g in ipairs({ "g1", "g2" }) do
                local res = d:depth("fan", g)
                if res.status == 200 then
                    for _, p in ipairs(res.json.partitions) do
                        assert.equals(0, p.pending, g .. " " .. p.partition)
                    end
                end
            end
        end
        -- A queue used without partitions: each group through its broker.
        assert.equals(201, a:push("plain", { 1, 2, 3 }).status)
        for group, via in pairs({ g1 = b, g2 = c }) do
            local res = via:pop("queue=plain&group=" .. group .. "&batch=10")
            assert.equals(200, res.status, res.body)
            local got = {}
            for _, m in ipairs(res.json.messages) do got[#got + 1] = m.payload end
            assert.same({ 1, 2, 3 }, got)
        end
    end)

    it("re-hashes once after owner_moved and sends the request to the "
       .. "owner its own view names now", function()
        local ds = start(2)
        local fake
        finally(function()
            if fake then os.execute("kill " .. fake) end
            daemon.stop_all(ds)
        end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        for i = 1, 40 do
            assert.equals(201, a:push("hop", { "1" }, "p-" .. i).status)
        end
        local mine = {}
        for p in pairs(b:held("hop")) do mine[#mine + 1] = p end
        table.sort(mine)
        -- A third member that takes some of b's partitions, and answers
        -- what it is sent owner_moved once it has left the cell.
        fake = moved_owner("f00000000000000f", 4022250974, 2, { a, b })
        local t0 = daemon.now()
        while (a:cell().live < 3 or b:cell().live < 3)
              and daemon.now() - t0 < 5 do
            daemon.sleep(0.05)
        end
        assert.equals(3, a:cell().live)
        assert.equals(3, b:cell().live)
        -- The first of b's partitions the newcomer owns goes to it, hears
        -- owner_moved after the cell saw it leave, and goes back to b.
        local rehashed = 'queen_ephemeral_forwarded_total{route="push",'
                         .. 'outcome="rehashed"} (%d+)'
        local moved
        for _, part in ipairs(mine) do
            local res = a:push("hop", { "2" }, part)
            assert.equals(201, res.status, res.body)
            if a:metric(rehashed) > 0 then
                moved = part
                break
            end
        end
        assert.truthy(moved, "the newcomer owned none of b's partitions")
        -- Its first message went with the hand-over b sent the newcomer on
        -- its joining, which the newcomer refused: tried again until the
        -- partition came home to b, and kept there.
        daemon.wait_until("b to keep its partition's first message",
                          function() return b:held("hop")[moved] == 2 end)
        assert.equals(0, b:metric('queen_ephemeral_wipes_total{reason='
                                  .. '"handover"} (%d+)'))
        assert.equals(1, a:metric(rehashed))
    end)

    it("serves at the edge a request whose owner answered owner_moved "
       .. "when the edge's own view now gives the partition to itself",
       function()
        local a = daemon.start({ db = true, env = ENV })
        local fake
        finally(function()
            if fake then os.execute("kill " .. fake) end
            a:stop()
        end)
        -- A second member that answers what it is sent owner_moved once it
        -- has left the cell: a's re-hash then names a itself.
        fake = moved_owner("f00000000000001f", 4022250975, 1, { a })
        daemon.wait_until("a to see the second member", function()
            return a:cell().live == 2
        end, 5)
        local rehashed = 'queen_ephemeral_forwarded_total{route="push",'
                         .. 'outcome="rehashed"} (%d+)'
        local moved
        for i = 1, 40 do
            local part = "p-" .. i
            local res = a:push("home", { "1" }, part)
            -- The client never hears the owner_moved: a serves it.
            assert.equals(201, res.status, res.body)
            if a:metric(rehashed) > 0 then
                moved = part
                break
            end
        end
        assert.truthy(moved, "the second member owned none of 40 partitions")
        assert.equals(1, a:cell().live)
        assert.equals(1, a:held("home")[moved])
        assert.equals(1, a:metric(rehashed))
    end)

    it("answers ephemeral_forward_failed within the relay's deadline when "
       .. "the owner accepts and never answers; a client that leaves "
       .. "cancels its relay", function()
        local ds = start(2, { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "10000",
                              QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
                              QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS = "500" })
        local frozen
        finally(function()
            if frozen then os.execute("kill -CONT " .. frozen) end
            daemon.stop_all(ds)
        end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local part = partition_on(a, b, "frozen")
        local push = daemon.format("POST", "/api/v1/ephemeral/push",
            '{"queue":"frozen","partition":"' .. part
            .. '","messages":[{"payload":2}]}')
        -- Stopped, b's kernel still accepts connections: nobody answers.
        os.execute("kill -STOP " .. b.pid)
        frozen = b.pid
        local t0 = daemon.now()
        local res = a:push("frozen", { "2" }, part)
        local took = daemon.now() - t0
        assert.equals(503, res.status, res.body)
        assert.equals("ephemeral_forward_failed", res.json.code)
        assert.equals("1", res.headers["retry-after"])
        assert.truthy(res.json.error:find("answer_timeout", 1, true))
        assert.is_true(took >= 0.45 and took < 1.5, "took " .. took .. " s")
        -- A client leaving while its push is in flight to b.
        local conn = a:connect()
        local unread = unread_at(b)
        conn:send(push)
        daemon.wait_until("the push to reach b", function()
            return more_unread(b, unread)
        end, 5)
        conn:close()
        local cancelled = 'queen_ephemeral_forwarded_total{route="push",'
                          .. 'outcome="cancelled"} (%d+)'
        a:await_metric(cancelled, 1, 2)
        os.execute("kill -CONT " .. b.pid)
        frozen = nil
        -- Thawed, b may apply what it had read (the loss contract's
        -- maybe), and serves on.
        assert.equals(201, a:push("frozen", { "3" }, part).status)
        local n = b:held("frozen")[part]
        assert.is_true(n >= 2 and n <= 4, n)
        -- A client leaving its relayed long poll: b unparks it.
        assert.equals(200, a:pop("queue=frozen&partition=" .. part
                                 .. "&batch=100&autoAck=true").status)
        conn = a:connect()
        conn:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=frozen"
                                .. "&partition=" .. part
                                .. "&wait=true&timeout=10000"))
        b:await_parked(1, 2)
        conn:close()
        b:await_parked(0, 2)
        assert.equals(1, a:metric('queen_ephemeral_forwarded_total{route='
                                   .. '"pop",outcome="cancelled"} (%d+)'))
        assert.is_true(a:alive() and b:alive())
    end)
end)
