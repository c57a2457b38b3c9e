-- What a connection may make the broker hold: unparsed input behind a
-- request that cannot be answered yet (a parked pop, a held write), and
-- answers its client does not read. Both are bounded per connection, and
-- a connection that was held back resumes in order once it may.
local socket = require("socket")
local daemon = require("e2e.daemon")
local helper = require("helper")

-- Under the sanitizers resident size means nothing (freed memory sits in
-- quarantine): the connections' behaviour is still asserted there.
local SANITIZED = os.getenv("EPHD_SANITIZED") ~= nil

local function rss_mib(d)
    local f = assert(io.open("/proc/" .. d.pid .. "/status"))
    local kib = tonumber(f:read("*a"):match("VmRSS:%s+(%d+)"))
    f:close()
    return kib / 1024
end

local function assert_grew_less(d, before, mib, what)
    local after = rss_mib(d)
    print(("\n%s: rss %.1f -> %.1f MiB"):format(what, before, after))
    if SANITIZED then return end
    assert.is_true(after - before < mib,
                   ("%s grew the broker by %.1f MiB"):format(what,
                                                            after - before))
end

-- Sends as much of data as the broker takes within `patience` seconds;
-- returns the bytes sent.
local function send_while_taken(c, data, patience)
    c.sock:settimeout(patience)
    local n, _, partial = c.sock:send(data)
    return n or partial
end

-- Sends what is left of data without blocking, for a reader that drains
-- answers as it goes.
local function send_some(c, data, from)
    c.sock:settimeout(0)
    local n, _, partial = c.sock:send(data, from)
    return (n or partial or from - 1) + 1
end

describe("backpressure", function()
    local d
    lazy_setup(function() d = daemon.start() end)
    lazy_teardown(function() d:stop() end)

    it("stops reading behind a parked pop and reads on once it is answered",
       function()
        local before = rss_mib(d)
        local c = d:connect()
        c:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=parked"
                                    .. "&wait=true&timeout=60000"))
        -- A push whose 64 MiB body (JSON padded with spaces) streams
        -- behind the parked pop: the broker may not hold it yet.
        local head = '{"queue":"behind","messages":[{"payload":1}]'
        local body = head .. (" "):rep(64 * 1048576 - #head - 1) .. "}"
        local push = "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: test\r\n"
                     .. "Content-Type: application/json\r\n"
                     .. "Content-Length: " .. #body .. "\r\n\r\n" .. body
        local sent = send_while_taken(c, push, 1)
        assert.is_true(sent < 32 * 1048576,
                       ("the broker read %d bytes behind a parked pop")
                           :format(sent))
        assert_grew_less(d, before, 8, "64 MiB behind a parked pop")
        -- Woken, the pop is answered first; then the push is read in full.
        assert.equals(201, d:push("parked", { '"wake"' }).status)
        local pop = c:receive()
        assert.equals(200, pop.status)
        assert.equals("wake", pop.json.messages[1].payload)
        c.sock:settimeout(30)
        assert(c.sock:send(push, sent + 1))
        local res = c:receive(30)
        assert.equals(201, res.status)
        assert.equals(1, res.json.pushed)
        c:close()
        assert.equals(1, d:depth("behind").json.pending)
    end)

    it("still releases a parked pop whose client goes away", function()
        local c = d:connect()
        c:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=gone"
                                    .. "&wait=true&timeout=60000"))
        d:await_parked(1)
        c:close()
        d:await_parked(0)
        -- Released, the waiter takes nothing: the message stays pending
        -- for the next pop, unleased.
        assert.equals(201, d:push("gone", { "1" }).status)
        local res = d:pop("queue=gone")
        assert.equals(1, #res.json.messages)
        assert.equals(0, res.json.messages[1].attempts)
    end)

    it("bounds the answers of connections that do not read them, and "
       .. "sends every one in order once they do", function()
        local before = rss_mib(d)
        -- Each connection pipelines 3,000 requests, a dashboard page (11
        -- KiB) and a health probe in turn: 33 MiB of answers each.
        local n, conns, raw = 3000, {}, {}
        for i = 1, n do
            raw[i] = i % 2 == 1 and daemon.format("GET", "/dashboard")
                     or daemon.format("GET", "/health")
        end
        raw = table.concat(raw)
        local sent = {}
        for i = 1, 4 do
            conns[i] = d:connect()
            sent[i] = send_some(conns[i], raw, 1)
        end
        d:await_settled()
        assert_grew_less(d, before, 24,
                         "12,000 pipelined requests on 4 unread connections")
        for i, c in ipairs(conns) do
            for k = 1, n do
                if sent[i] <= #raw then sent[i] = send_some(c, raw, sent[i]) end
                local res = assert(c:receive(10))
                assert.equals(200, res.status)
                if k % 2 == 1 then
                    assert.truthy(res.headers["content-type"]:find("text/html"))
                else
                    assert.equals("application/json",
                                  res.headers["content-type"])
                end
            end
            c:close()
        end
    end)

    it("leaves a pop unread behind answers held back, and answers it in "
       .. "order once they are read", function()
        local c = d:connect()
        local raw = {}
        for i = 1, 200 do raw[i] = daemon.format("GET", "/dashboard") end
        raw[#raw + 1] = daemon.format("GET", "/api/v1/ephemeral/pop?queue="
                                             .. "held&wait=true&timeout=60000")
        raw[#raw + 1] = daemon.format("GET", "/health")
        c:send(table.concat(raw))
        -- Parsing pauses while the answers are unread: the pop is not
        -- parked, and finds the push when its turn comes.
        d:await_settled()
        assert.equals(0, d:parked())
        assert.equals(201, d:push("held", { '"late"' }).status)
        for _ = 1, 200 do assert.equals(200, c:receive().status) end
        local pop = c:receive()
        assert.equals("late", pop.json.messages[1].payload)
        assert.equals("ok", c:receive().json.status)
        c:close()
    end)

    it("answers every request of a client that stops sending before it "
       .. "reads", function()
        local c = d:connect()
        local raw = {}
        for i = 1, 600 do raw[i] = daemon.format("GET", "/dashboard") end
        raw[#raw + 1] = daemon.format("GET", "/health")
        c:send(table.concat(raw))
        c.sock:shutdown("send")
        d:await_settled()
        for _ = 1, 600 do assert.equals(200, assert(c:receive()).status) end
        assert.equals("ok", assert(c:receive()).json.status)
        c:close()
    end)
    it("gives a chunked body back once its request is answered", function()
        local before = rss_mib(d)
        local c = d:connect()
        -- 32 MiB of JSON whitespace around a reset, in 1 MiB chunks.
        local chunk = (" "):rep(1048576)
        local raw = { "POST /api/v1/ephemeral/reset HTTP/1.1\r\nHost: t\r\n"
                      .. "Content-Type: application/json\r\n"
                      .. "Transfer-Encoding: chunked\r\n\r\n" }
        for _ = 1, 32 do
            raw[#raw + 1] = ("%x\r\n%s\r\n"):format(#chunk, chunk)
        end
        local body = '{"queue":"q"}'
        raw[#raw + 1] = ("%x\r\n%s\r\n0\r\n\r\n"):format(#body, body)
        c.sock:settimeout(30)
        assert(c.sock:send(table.concat(raw)))
        assert.equals(200, c:receive().status)
        -- The connection stays open and idle: it must not keep the body.
        -- (After a quiet second the broker trims its heap.)
        if not SANITIZED then
            daemon.wait_until(function()
                return ("the heap trimmed: rss %.1f -> %.1f MiB")
                    :format(before, rss_mib(d))
            end, function() return rss_mib(d) - before < 8 end, 5, 0.2)
        end
        assert_grew_less(d, before, 8, "an idle connection after a chunked "
                                       .. "32 MiB body")
        c:close()
    end)
end)

-- Each connection is bounded on its own; together they are bounded by
-- QUEEN_EPHEMERAL_MAX_CLIENT_BYTES: past it the one holding the most is
-- closed, as Redis's maxmemory-clients does.
describe("every connection's buffers together", function()
    local BUDGET = 8 * 1048576
    local d
    lazy_setup(function()
        d = daemon.start({ env = {
            QUEEN_EPHEMERAL_MAX_CLIENT_BYTES = tostring(BUDGET),
            QUEEN_EPHEMERAL_MAX_BODY_BYTES = "1048576",
            QUEEN_EPHEMERAL_MAX_UNWRITTEN_BYTES = "65536",
            QUEEN_EPHEMERAL_QUEUE_MAX_BYTES = "1000000000",
            QUEEN_EPHEMERAL_RATE = "0",
        } })
    end)
    lazy_teardown(function() d:stop() end)

    local function scrape(series)
        return d:metric("\n" .. series .. " (%d+)")
    end

    it("close the largest holders past the budget; the rest go on",
       function()
        local before = rss_mib(d)
        -- Twelve pushes of 1,000,000 bytes, each sent but for its last
        -- 100,000: each holds about 1 MiB, twelve hold more than eight.
        local head = '{"queue":"big","messages":[{"payload":1}]'
        local body = head .. (" "):rep(1000000 - #head - 1) .. "}"
        local push = "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: test\r\n"
                     .. "Content-Type: application/json\r\n"
                     .. "Content-Length: " .. #body .. "\r\n\r\n" .. body
        local cut = #push - 100000
        local conns = {}
        for i = 1, 12 do
            conns[i] = d:connect()
            conns[i].sock:settimeout(10)
            assert(conns[i].sock:send(push:sub(1, cut)))
        end
        d:await_metric("\nqueen_ephemeral_clients_evicted_total (%d+)",
                       function(n) return n >= 1 end)
        assert.is_true(scrape("queen_ephemeral_client_bytes") <= BUDGET)
        -- The survivors finish their pushes; the closed ones are closed.
        local served, closed = 0, 0
        for _, c in ipairs(conns) do
            local ok = c.sock:send(push, cut + 1)
            local res = ok and c:receive(10)
            if res then
                assert.equals(201, res.status)
                served = served + 1
            else
                closed = closed + 1
            end
            c:close()
        end
        assert.is_true(closed >= 1 and served >= 1,
                       ("served %d, closed %d"):format(served, closed))
        assert.equals(served, d:depth("big").json.pending)
        assert.truthy(d:read_log():find("client_evicted", 1, true))
        assert_grew_less(d, before, 3 * BUDGET / 1048576,
                         "twelve 1 MB bodies under an 8 MiB budget")
        -- A new client is served as ever.
        assert.equals(201, d:push("after", { "1" }).status)
    end)

    it("count an answer handed to the kernel until its client reads it",
       function()
        -- 24 MB of messages, then one pop of all of them on a connection
        -- that never reads: more than the kernel's socket buffers take,
        -- so most of the answer waits in the broker, past the budget.
        local payload = '"' .. ("x"):rep(1000000) .. '"'
        for _ = 1, 24 do
            assert.equals(201, d:push("unread", { payload }).status)
        end
        local c = d:connect()
        local evicted = scrape("queen_ephemeral_clients_evicted_total")
        c:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=unread"
                                    .. "&batch=100&autoAck=true"))
        d:await_metric("\nqueen_ephemeral_clients_evicted_total (%d+)",
                       function(n) return n > evicted end)
        assert.is_true(scrape("queen_ephemeral_client_bytes") <= BUDGET)
        c:close()
    end)

    it("refuse at boot a budget smaller than one largest request",
       function()
        local out, rc = helper.run("QUEEN_EPHEMERAL_MAX_CLIENT_BYTES=1048576 "
                                   .. helper.build .. "/ephd --listen "
                                   .. "127.0.0.1:1")
        assert.is_not.equals(0, rc)
        assert.truthy(out:find("QUEEN_EPHEMERAL_MAX_CLIENT_BYTES=1048576 is "
                               .. "not usable", 1, true), out)
    end)
end)

