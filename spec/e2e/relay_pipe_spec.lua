-- The pipelined relay's failure semantics (core/cell/peer_client.h): the
-- pushes an edge relays to one owner's partition go on one connection,
-- several in flight, and what a lost or slow line does to them. A request
-- the owner may have read is never sent again (it may have been applied):
-- its client hears 503 ephemeral_forward_failed, promptly; answers are
-- matched to requests in order, an owner_moved among them re-sent alone;
-- and a parked pop never holds a line the pushes need.
local cjson = require("cjson")
local socket = require("socket")
local daemon = require("e2e.daemon")
local fake_member = require("e2e.fake_member")
local placement = require("ephd.placement")

local TOKEN = "relay-pipe-spec-token-0123456789abcdef"

local function env(extra)
    local e = { QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
                QUEEN_EPHEMERAL_MEMBER_TTL_MS = "60000" }
    for k, v in pairs(extra or {}) do e[k] = v end
    return e
end

-- The first `count` (1) partitions of queue q that `owner` owns among
-- members (ids as the cell shows them) and, when `alone` is {ids, id},
-- that id owns among ids alone; for the tenant an anonymous request to d
-- is served as.
local function partitions_of(d, owner, members, q, count, alone)
    local tenant = d:request("GET", "/api/v1/ephemeral/cell").json.tenant
    local function of(ids, part)
        local ms = {}
        for i, id in ipairs(ids) do
            ms[i] = { id = placement.id(id), hex = id }
        end
        return placement.owner(ms, tenant, q, part).hex
    end
    local found = {}
    for i = 1, 1000 do
        local part = "p" .. i
        if of(members, part) == owner
           and (not alone or of(alone[1], part) == alone[2]) then
            found[#found + 1] = part
            if #found == (count or 1) then return unpack(found) end
        end
    end
    error("not enough partitions of " .. owner .. "'s in 1000")
end

local function ids_of(ds, fake)
    local ids = {}
    for i, d in ipairs(ds) do ids[i] = d:cell().self.id end
    if fake then ids[#ids + 1] = fake.id end
    return ids
end

-- A client's push of one message (its payload n) through d, on a
-- connection of its own: sent now, its answer read by answers().
local function push(d, q, part, n)
    local c = d:connect()
    c:send(daemon.format("POST", "/api/v1/ephemeral/push",
                         cjson.encode({ queue = q, partition = part,
                                        messages = { { payload = n } } })))
    return { conn = c, n = n, sent = daemon.now() }
end

-- Until every client has its answer (res, and at: when it came), for up
-- to `seconds`, serving the fake meanwhile when there is one.
local function answers(fake, clients, seconds)
    local function all_in()
        local all = true
        for _, cl in ipairs(clients) do
            if not cl.res then
                if socket.select({ cl.conn.sock }, nil, 0)[cl.conn.sock] then
                    cl.res = assert(cl.conn:receive(1))
                    cl.at = daemon.now()
                    cl.conn:close()
                else
                    all = false
                end
            end
        end
        return all
    end
    if fake then
        fake:pump("every client's answer", all_in, seconds)
    else
        daemon.wait_until("every client's answer", all_in, seconds, 0.005)
    end
end

-- The owner's answer to a push, naming the push it answers.
local function pushed(req)
    return '{"pushed":1,"for":' .. req.payload .. '}'
end

local FAILED = 'queen_ephemeral_forwarded_total{route="push",'
               .. 'outcome="failed"} (%d+)'

-- An edge a with a fake member beside it: the fake, a partition of q it
-- owns, and a cleanup for the spec's finally.
local function edge_and_fake(extra_env)
    local a = daemon.start({ db = true, env = env(extra_env) })
    local fake = fake_member.new()
    local function cleanup()
        fake:close()
        a:stop()
    end
    local ok, err = pcall(function()
        fake:join(TOKEN, { a }, 2)
    end)
    if not ok then
        cleanup()
        error(err, 0)
    end
    return a, fake, partitions_of(a, fake.id, ids_of({ a }, fake), "q"), cleanup
end

-- n clients push to part through a at once, client i payload i; the fake
-- reads all n, which must come on one connection (pipelined): the
-- clients, and that line.
local function pipelined(a, fake, part, n)
    local clients = {}
    for i = 1, n do clients[i] = push(a, "q", part, i) end
    fake:pump(n .. " relayed pushes", function()
        return #fake.requests >= n
    end)
    local line = fake.requests[1].line
    for _, req in ipairs(fake.requests) do
        assert.equals(line.n, req.line.n, "the pushes came on several lines")
    end
    return clients, line
end

describe("the pipelined relay", function()
    for _, how in ipairs({ "closes", "resets" }) do
        it("fails what an owner that " .. how .. " its line read and did not "
           .. "answer, and sends none of it again", function()
            local a, fake, part, cleanup = edge_and_fake({
                QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS = "3000" })
            finally(cleanup)
            local failed0 = a:metric(FAILED)
            local n, k = 6, 2
            local clients, line = pipelined(a, fake, part, n)
            assert.is_true(line.reads < n,
                           "each push came in a read of its own")
            -- The edge counts them: n requests on its pipes, in at most n
            -- writes (how many it read per loop turn is the machine's).
            local sent = a:metric("\nqueen_ephemeral_relay_pipelined_total (%d+)")
            local writes =
                a:metric("\nqueen_ephemeral_relay_pipe_writes_total (%d+)")
            assert.equals(n, sent)
            assert.is_true(writes >= 1 and writes <= n, writes .. " writes")
            for i = 1, k do
                local req = fake.requests[i]
                fake_member.answer(req, 201, pushed(req))
            end
            if how == "closes" then
                line:close()
            else
                -- The answers reach the edge before the reset does.
                local first = {}
                for i = 1, k do
                    first[i] = clients[fake.requests[i].payload]
                end
                answers(fake, first, 5)
                line:reset()
            end
            answers(fake, clients, 5)
            local answered = {}
            for i = 1, k do answered[fake.requests[i].payload] = true end
            for _, cl in ipairs(clients) do
                if answered[cl.n] then
                    -- Its own answer, not the one before or after it.
                    assert.equals(201, cl.res.status, cl.res.body)
                    assert.same({ pushed = 1, ["for"] = cl.n }, cl.res.json)
                else
                    assert.equals(503, cl.res.status, cl.res.body)
                    assert.equals("ephemeral_forward_failed", cl.res.json.code)
                    -- At once, not at the relay's deadline.
                    assert.is_true(cl.at - cl.sent < 2.5,
                                   "answered after " .. (cl.at - cl.sent))
                end
            end
            -- Each push was read once: none sent again on a fresh line.
            assert.equals(failed0 + n - k, a:metric(FAILED))
            assert.equals(n, #fake.requests)
            local seen = {}
            for _, req in ipairs(fake.requests) do
                assert.is_nil(seen[req.payload], "read twice: " .. req.payload)
                seen[req.payload] = true
            end
            -- And the next push finds a fresh line.
            local after = { push(a, "q", part, 99) }
            fake:pump("the next push", function()
                return #fake.requests == n + 1
            end)
            assert.are_not.equal(line.n, fake.requests[n + 1].line.n)
            fake_member.answer(fake.requests[n + 1], 201, '{"pushed":1}')
            answers(fake, after, 5)
            assert.equals(201, after[1].res.status)
            assert.equals(n + 1, #fake.requests)
        end)
    end

    it("sends a push once more, on a fresh line, when the owner closed a "
       .. "line it had answered in full as the push went out on it, and "
       .. "only once", function()
        local a, fake, part, cleanup = edge_and_fake()
        finally(cleanup)
        local failed0 = a:metric(FAILED)
        local first = { push(a, "q", part, 1) }
        fake:pump("the first push", function() return #fake.requests == 1 end)
        fake_member.answer(fake.requests[1], 201, pushed(fake.requests[1]))
        answers(fake, first, 5)
        assert.equals(201, first[1].res.status)
        -- The line is quiet: everything answered, nothing since. The owner
        -- closes it as ephd's server closes an idle one, and the next push
        -- was already on its way (here: read, so the spec sees it came).
        local quiet = fake.requests[1].line
        local next = { push(a, "q", part, 2) }
        fake:pump("the second push", function() return #fake.requests == 2 end)
        assert.equals(quiet.n, fake.requests[2].line.n)
        quiet:close()
        -- Sent again on a fresh line, which the owner also closes unanswered:
        -- that one was not quiet, and the push is not sent a third time.
        fake:pump("the second push again", function()
            return #fake.requests == 3
        end, 5)
        local again = fake.requests[3]
        assert.equals(2, again.payload)
        assert.are_not.equal(quiet.n, again.line.n)
        again.line:close()
        answers(fake, next, 5)
        assert.equals(503, next[1].res.status, next[1].res.body)
        assert.equals("ephemeral_forward_failed", next[1].res.json.code)
        assert.equals(3, #fake.requests)
        assert.equals(failed0 + 1, a:metric(FAILED))
        -- A quiet line closed under a push that is then answered: the
        -- client hears the answer.
        local third = { push(a, "q", part, 3) }
        fake:pump("the third push", function() return #fake.requests == 4 end)
        fake_member.answer(fake.requests[4], 201, pushed(fake.requests[4]))
        local line = fake.requests[4].line
        answers(fake, third, 5)
        assert.equals(201, third[1].res.status)
        local fourth = { push(a, "q", part, 4) }
        fake:pump("the fourth push", function() return #fake.requests == 5 end)
        assert.equals(line.n, fake.requests[5].line.n)
        line:close()
        fake:pump("the fourth push again", function()
            return #fake.requests == 6
        end, 5)
        fake_member.answer(fake.requests[6], 201, pushed(fake.requests[6]))
        answers(fake, fourth, 5)
        assert.equals(201, fourth[1].res.status, fourth[1].res.body)
        assert.same({ pushed = 1, ["for"] = 4 }, fourth[1].res.json)
    end)

    it("reads and drops the answer of a push whose client left once it "
       .. "was written, and passes the others back in order", function()
        local CANCELLED = 'queen_ephemeral_forwarded_total{route="push",'
                          .. 'outcome="cancelled"} (%d+)'
        local a, fake, part, cleanup = edge_and_fake()
        finally(cleanup)
        local cancelled0 = a:metric(CANCELLED)
        local clients, line = pipelined(a, fake, part, 4)
        local gone = clients[fake.requests[2].payload]
        gone.conn:close()
        a:await_metric(CANCELLED, cancelled0 + 1)
        for _, req in ipairs(fake.requests) do
            fake_member.answer(req, 201, pushed(req))
        end
        local stayed = {}
        for _, cl in ipairs(clients) do
            if cl ~= gone then stayed[#stayed + 1] = cl end
        end
        answers(fake, stayed, 5)
        for _, cl in ipairs(stayed) do
            assert.equals(201, cl.res.status, cl.res.body)
            assert.same({ pushed = 1, ["for"] = cl.n }, cl.res.json)
        end
        -- The line goes on: the next push is answered on it.
        local after = { push(a, "q", part, 5) }
        fake:pump("the next push", function() return #fake.requests == 5 end)
        assert.equals(line.n, fake.requests[5].line.n)
        fake_member.answer(fake.requests[5], 201, pushed(fake.requests[5]))
        answers(fake, after, 5)
        assert.same({ pushed = 1, ["for"] = 5 }, after[1].res.json)
    end)

    it("matches answers to pushes however their bytes arrive: several in "
       .. "one read, one over several, chunked or not", function()
        local a, fake, part, cleanup = edge_and_fake()
        finally(cleanup)
        local clients = pipelined(a, fake, part, 4)
        local bytes = {}
        for i, req in ipairs(fake.requests) do
            local body = pushed(req)
            if i == 2 then
                bytes[i] = "HTTP/1.1 201 Created\r\nContent-Type: "
                           .. "application/json\r\nTransfer-Encoding: "
                           .. "chunked\r\n\r\n" .. "5\r\n"
                           .. body:sub(1, 5) .. "\r\n"
                           .. ("%x"):format(#body - 5) .. "\r\n"
                           .. body:sub(6) .. "\r\n0\r\n\r\n"
            else
                bytes[i] = fake_member.answer_bytes(
                    201, body, "X-Padding: " .. i .. "\r\n")
            end
        end
        -- The first two whole in one send, the rest a few bytes at a time,
        -- a millisecond apart so the edge tends to read them apart.
        local line = fake.requests[1].line
        line:send(bytes[1] .. bytes[2])
        local rest = bytes[3] .. bytes[4]
        for at = 1, #rest, 7 do
            line:send(rest:sub(at, at + 6))
            fake:step(0.001)
        end
        answers(fake, clients, 5)
        for _, cl in ipairs(clients) do
            assert.equals(201, cl.res.status, cl.res.body)
            assert.same({ pushed = 1, ["for"] = cl.n }, cl.res.json)
        end
    end)

    it("lets the pushes on a line finish with their owner's answers when "
       .. "the edge stops", function()
        local a, fake, part, cleanup = edge_and_fake()
        finally(cleanup)
        local clients = pipelined(a, fake, part, 3)
        os.execute("kill -TERM " .. a.pid)
        -- The owner answers once the stop began (the edge told it so).
        fake:pump("the edge's leaving notice", function()
            return fake.seen.leaving
        end)
        for _, req in ipairs(fake.requests) do
            fake_member.answer(req, 201, pushed(req))
        end
        answers(fake, clients, 5)
        for _, cl in ipairs(clients) do
            assert.equals(201, cl.res.status, cl.res.body)
            assert.same({ pushed = 1, ["for"] = cl.n }, cl.res.json)
        end
        a:await_exit(10)
    end)

    it("fails a slow owner's whole line at the oldest answer's deadline, and "
       .. "sends the next pushes on a fresh line", function()
        local a, fake, part, cleanup = edge_and_fake({
            QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS = "500" })
        finally(cleanup)
        local failed0 = a:metric(FAILED)
        local n = 5
        local clients, line = pipelined(a, fake, part, n)
        local first = clients[1].sent
        answers(fake, clients, 5)
        for _, cl in ipairs(clients) do
            assert.equals(503, cl.res.status, cl.res.body)
            assert.equals("ephemeral_forward_failed", cl.res.json.code)
            local took = cl.at - cl.sent
            assert.is_true(took >= 0.45, "answered after " .. took)
            -- At the oldest's deadline, whoever came later on the line.
            assert.is_true(cl.at - first < 0.5 + 1.5,
                           "answered after " .. (cl.at - first))
        end
        assert.equals(failed0 + n, a:metric(FAILED))
        -- None was sent again: the owner may have applied each.
        assert.equals(n, #fake.requests)
        -- The edge dropped the line: the owner sees it closed.
        fake:pump("the edge to close the slow line", function()
            return line.eof
        end, 5)
        -- Answers that come too late reach nobody; the owner is fast again.
        fake.on_request = function(req)
            fake_member.answer(req, 201, '{"pushed":1}')
        end
        local again = {}
        for i = 1, n do again[i] = push(a, "q", part, 100 + i) end
        answers(fake, again, 5)
        for _, cl in ipairs(again) do
            assert.equals(201, cl.res.status, cl.res.body)
            assert.is_true(cl.at - cl.sent < 0.5, "answered after "
                           .. (cl.at - cl.sent))
        end
        assert.equals(2 * n, #fake.requests)
        for i = n + 1, 2 * n do
            assert.are_not.equal(line.n, fake.requests[i].line.n)
        end
    end)

    it("passes back the answers around an owner_moved in order, and sends "
       .. "that one push alone to the member the owner named", function()
        local REHASHED = 'queen_ephemeral_forwarded_total{route="push",'
                         .. 'outcome="rehashed"} (%d+)'
        local ds = { daemon.start({ db = true, env = env() }) }
        local a = ds[1]
        local fake = fake_member.new()
        finally(function()
            fake:close()
            daemon.stop_all(ds)
        end)
        fake:join(TOKEN, { a }, 2)
        -- c joins once the fake no longer answers as ready (as in
        -- cell_owner_spec): in c's view the partition is c's, in a's the
        -- fake's.
        fake.ready = false
        ds[2] = daemon.start({ db = true, env = env() })
        local c = ds[2]
        fake:pump("a to take c, and c to leave the fake out", function()
            return a:cell().live == 3 and c:cell().live == 2
        end)
        local ida, idc = a:cell().self.id, c:cell().self.id
        local part = partitions_of(a, fake.id, { ida, idc, fake.id }, "q", 1,
                                   { { ida, idc }, idc })
        local rehashed0 = a:metric(REHASHED)
        local clients = pipelined(a, fake, part, 3)
        local moved = fake.requests[2]
        fake_member.answer(fake.requests[1], 201, pushed(fake.requests[1]))
        fake_member.answer(moved, 503, '{"error":"this broker does not own the '
                                      .. 'partition; retry soon","code":'
                                      .. '"owner_moved"}',
                          "Retry-After: 1\r\nX-Queen-Owner: " .. idc .. "\r\n")
        fake_member.answer(fake.requests[3], 201, pushed(fake.requests[3]))
        answers(fake, clients, 5)
        for i, req in ipairs(fake.requests) do
            local res = clients[req.payload].res
            assert.equals(201, res.status, res.body)
            if i == 2 then
                -- c's own answer, which names c as the owner that served it.
                assert.same({ pushed = 1 }, res.json)
                assert.equals("http://127.0.0.1:" .. c.port,
                              res.headers["x-queen-owner-address"])
            else
                assert.same({ pushed = 1, ["for"] = req.payload }, res.json)
            end
        end
        assert.equals(3, #fake.requests)
        assert.equals(rehashed0 + 1, a:metric(REHASHED))
        -- c holds the one push it was sent, and nothing else.
        local res = c:pop("queue=q&partition=" .. part .. "&batch=10")
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages)
        assert.equals(moved.payload, res.json.messages[1].payload)
    end)

    it("keeps a parked pop off the line its owner's pushes flow on, and "
       .. "wakes it through the edge", function()
        -- One pipe: every push to b is on the one line a parked pop would
        -- block, were it put there.
        local ds = daemon.start_cell(2, env({
            QUEEN_EPHEMERAL_RELAY_PIPES = "1" }))
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local ids = ids_of(ds)
        local parts = { partitions_of(a, ids[2], ids, "w", 9) }
        local waiting = a:connect()
        local t0 = daemon.now()
        waiting:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=w"
                                          .. "&partition=" .. parts[1]
                                          .. "&wait=true&timeout=8000"))
        b:await_parked(1)
        local clients = {}
        for i = 1, 40 do
            clients[i] = push(a, "w", parts[2 + (i - 1) % 8], i)
        end
        answers(nil, clients, 5)
        for _, cl in ipairs(clients) do
            assert.equals(201, cl.res.status, cl.res.body)
            assert.is_true(cl.at - cl.sent < 2, "answered after "
                                                .. (cl.at - cl.sent))
        end
        local held = 0
        for _, n in pairs(b:held("w")) do held = held + n end
        assert.equals(40, held)
        -- Still parked, nothing answered.
        assert.is_nil(socket.select({ waiting.sock }, nil, 0)[waiting.sock])
        assert.equals(1, b:parked())
        local woke = push(a, "w", parts[1], 77)
        answers(nil, { woke }, 5)
        assert.equals(201, woke.res.status, woke.res.body)
        local res = assert(waiting:receive(5))
        assert.is_true(daemon.now() - t0 < 8, "answered at its timeout")
        assert.equals(200, res.status, res.body)
        assert.equals(1, #res.json.messages)
        assert.equals(77, res.json.messages[1].payload)
        waiting:close()
    end)
end)
