-- The pipelined relay against an owner that does not play by the rules
-- and clients that leave at the worst moment (core/cell/peer_client.h):
-- the edge never writes from a body its client took with it, and never
-- writes again a push the owner may have read.
local cjson = require("cjson")
local socket = require("socket")
local daemon = require("e2e.daemon")
local fake_member = require("e2e.fake_member")
local placement = require("ephd.placement")

local TOKEN = "relay-hostile-spec-token-0123456789abcdef"
local BIG = 16 * 1024 * 1024 -- past what the sockets between them buffer

-- An edge with a fake member beside it, and a partition of q the fake
-- owns for the tenant an anonymous request is served as.
local function edge_and_fake()
    local a = daemon.start({ db = true, env = {
        QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
        QUEEN_EPHEMERAL_MEMBER_TTL_MS = "60000",
        QUEEN_EPHEMERAL_RELAY_PIPES = "1",
        -- The fake reads a big push slowly (a Lua string grown a read at a
        -- time): no deadline may strike while it does.
        QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS = "30000" } })
    local fake = fake_member.new()
    local function cleanup()
        fake:close()
        a:stop()
    end
    local ok, err = pcall(function() fake:join(TOKEN, { a }, 2) end)
    if not ok then
        cleanup()
        error(err, 0)
    end
    local tenant = a:request("GET", "/api/v1/ephemeral/cell").json.tenant
    local ms = {
        { id = placement.id(a:cell().self.id), hex = a:cell().self.id },
        { id = placement.id(fake.id), hex = fake.id } }
    for i = 1, 1000 do
        if placement.owner(ms, tenant, "q", "p" .. i).hex == fake.id then
            return a, fake, "p" .. i, cleanup
        end
    end
    cleanup()
    error("no partition of the fake's in 1000")
end

-- A client's push through a of one message, payload n (a number, or a
-- string of that many bytes), on a connection of its own.
local function push(a, part, n)
    local c = a:connect()
    c:send(daemon.format("POST", "/api/v1/ephemeral/push", cjson.encode({
        queue = "q", partition = part, messages = { { payload = n } } })))
    return { conn = c, n = n, sent = daemon.now() }
end

-- Serves the fake until the client has its answer.
local function answer_of(fake, cl, seconds)
    fake:pump("a client's answer", function()
        if socket.select({ cl.conn.sock }, nil, 0)[cl.conn.sock] then
            cl.res = assert(cl.conn:receive(1))
            cl.at = daemon.now()
            cl.conn:close()
        end
        return cl.res
    end, seconds or 5)
    return cl.res
end

local function pushes_of(fake, n)
    local seen = 0
    for _, req in ipairs(fake.requests) do
        if req.payload == n then seen = seen + 1 end
    end
    return seen
end

describe("the pipelined relay, hostile", function()
    it("ends a line whose owner answered a push before reading its body, "
       .. "and never writes the rest of the body the client took away",
       function()
        local a, fake, part, cleanup = edge_and_fake()
        finally(cleanup)
        local early
        fake.on_head = function(line, head)
            if not head:find("^POST /api/v1/ephemeral/push") then return end
            early = line
            line.paused = true
            line:send(fake_member.answer_bytes(201, '{"pushed":1}'))
            return true
        end
        local cl = push(a, part, string.rep("x", BIG))
        local res = answer_of(fake, cl, 10)
        assert.equals(201, res.status, res.body)
        -- The owner reads again: the edge has dropped that line, so what
        -- it reads ends, short of the body, and the edge lives on.
        early.paused = false
        fake:pump("the early line to end", function() return early.eof end, 5)
        assert.is_true((early.bytes or 0) < BIG,
                       "the whole body came: " .. tostring(early.bytes))
        fake.on_head = nil
        fake.on_request = function(req)
            fake_member.answer(req, 201, '{"pushed":1,"for":7}')
        end
        local after = push(a, part, 7)
        res = answer_of(fake, after)
        assert.equals(201, res.status, res.body)
        assert.are_not.equal(early.n, fake.requests[#fake.requests].line.n)
        assert.is_true(a:alive())
    end)

    it("keeps a line whose client left mid-write of its push, for the "
       .. "pushes the owner read on it, and writes none of them again",
       function()
        local a, fake, part, cleanup = edge_and_fake()
        finally(cleanup)
        -- The line answers everything: it is quiet.
        fake.on_request = function(req)
            if req.payload ~= 2 then
                fake_member.answer(req, 201, ('{"pushed":1,"for":%s}')
                                             :format(req.payload or "null"))
            end
        end
        local first = push(a, part, 1)
        assert.equals(201, answer_of(fake, first).status)
        -- Push 2 is read and held; then the line is not read any more.
        local held = push(a, part, 2)
        fake:pump("push 2", function() return pushes_of(fake, 2) == 1 end)
        local line = fake.requests[#fake.requests].line
        line.paused = true
        -- A big push behind it, its client gone once the edge is writing
        -- it (the line has bytes the fake has not read).
        local leaver = push(a, part, string.rep("y", BIG))
        daemon.wait_until("the big push on the line", function()
            return socket.select({ line.sock }, nil, 0)[line.sock] ~= nil
        end, 10, 0.01)
        leaver.conn:close()
        -- The line stays: push 2 neither fails nor comes again.
        local t = daemon.now() + 0.5
        fake:pump("a moment", function() return daemon.now() > t end)
        assert.is_false(line.closed or line.eof or false)
        assert.is_nil(socket.select({ held.conn.sock }, nil, 0)[held.conn.sock])
        fake_member.answer(fake.requests[#fake.requests], 201,
                           '{"pushed":1,"for":2}')
        local res = answer_of(fake, held, 5)
        assert.equals(201, res.status, res.body)
        assert.same({ pushed = 1, ["for"] = 2 }, res.json)
        -- The owner reads the rest (answered, and dropped by the edge);
        -- the next push goes on the same line.
        line.paused = false
        local after = push(a, part, 3)
        res = answer_of(fake, after, 10)
        assert.equals(201, res.status, res.body)
        assert.same({ pushed = 1, ["for"] = 3 }, res.json)
        assert.equals(line.n, fake.requests[#fake.requests].line.n)
        assert.equals(1, pushes_of(fake, 2), "push 2 was written again")
        assert.equals(4, #fake.requests)
        assert.is_true(a:alive())
    end)

    it("matches each answer to its own push through interim answers, "
       .. "trailers and a trickle, and drops a line with bytes after its "
       .. "last answer", function()
        local a, fake, part, cleanup = edge_and_fake()
        finally(cleanup)
        local clients = {}
        for i = 1, 5 do clients[i] = push(a, part, i) end
        fake:pump("5 relayed pushes", function() return #fake.requests == 5 end)
        local line = fake.requests[1].line
        for _, req in ipairs(fake.requests) do
            assert.equals(line.n, req.line.n, "the pushes came apart")
        end
        local function body(req)
            return ('{"pushed":1,"for":%d}'):format(req.payload)
        end
        local r = fake.requests
        local chunked = body(r[2])
        local bytes = {
            "HTTP/1.1 100 Continue\r\n\r\n"
                .. fake_member.answer_bytes(201, body(r[1])),
            "HTTP/1.1 102 Processing\r\nX-Queen-Owner: 0000000000000bad"
                .. "\r\n\r\nHTTP/1.1 201 Created\r\nContent-Type: "
                .. "application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                .. ("%x"):format(#chunked) .. "\r\n" .. chunked
                .. "\r\n0\r\nX-Trailer: t\r\nContent-Length: 99\r\n\r\n",
            "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
                .. fake_member.answer_bytes(201, body(r[3]),
                                            "Connection: keep-alive\r\n"),
            fake_member.answer_bytes(201, body(r[4])),
            fake_member.answer_bytes(201, body(r[5])) .. "HTTP/1.1 200 OK\r\n",
        }
        line:send(bytes[1] .. bytes[2])
        -- The third a byte at a time, the rest whole.
        for at = 1, #bytes[3] do
            line:send(bytes[3]:sub(at, at))
            if at % 16 == 0 then fake:step(0.001) end
        end
        line:send(bytes[4] .. bytes[5])
        for _, cl in ipairs(clients) do answer_of(fake, cl, 5) end
        for _, cl in ipairs(clients) do
            assert.equals(201, cl.res.status, cl.res.body)
            assert.same({ pushed = 1, ["for"] = cl.n }, cl.res.json)
        end
        -- What followed the last answer owed ended the line.
        fake:pump("the line to end", function() return line.eof end, 5)
        fake.on_request = function(req)
            fake_member.answer(req, 201, body(req))
        end
        local after = push(a, part, 6)
        assert.same({ pushed = 1, ["for"] = 6 }, answer_of(fake, after).json)
        assert.are_not.equal(line.n, fake.requests[6].line.n)
    end)

    it("stops cleanly with a body lent to a line its owner does not read",
       function()
        local a, fake, part, cleanup = edge_and_fake()
        finally(cleanup)
        fake.on_request = function(req)
            fake_member.answer(req, 201, '{"pushed":1}')
        end
        local first = push(a, part, 1)
        assert.equals(201, answer_of(fake, first).status)
        local line = fake.requests[1].line
        line.paused = true
        local leaver = push(a, part, string.rep("z", BIG))
        daemon.wait_until("the big push on the line", function()
            return socket.select({ line.sock }, nil, 0)[line.sock] ~= nil
        end, 10, 0.01)
        leaver.conn:close()
        daemon.wait_until("the leaver's relay cancelled", function()
            return a:metric('queen_ephemeral_forwarded_total{route="push",'
                            .. 'outcome="cancelled"} (%d+)') == 1
        end, 5, 0.01)
        -- Nothing waits on the line: the stop does not either, and what
        -- it lent is given back (stop fails on any sanitizer report).
        assert.is_true(a:stop() < 5)
    end)
end)
