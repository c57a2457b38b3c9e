-- ephd.client against a real broker: every verb, long polls, and the
-- contract's codes arriving as typed errors.
local daemon = require("e2e.daemon")
local client = require("ephd.client")

describe("ephd.client", function()
    local d, c
    lazy_setup(function()
        d = daemon.start({ db = true, env = {
            QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "3",
            QUEEN_EPHEMERAL_RATE = "0",
        } })
        c = client.new({ url = "http://127.0.0.1:" .. d.port, timeout = 5 })
    end)
    lazy_teardown(function()
        c:close()
        d:stop()
        daemon.forget_declarations()
    end)

    it("pushes Lua values and raw JSON, pops them back", function()
        assert.equals(2, c:push("cl-1", { { user = "alice" },
                                          client.raw('{"n": 1.0}') }))
        local msgs = assert(c:pop("cl-1", { batch = 10, autoAck = true }))
        assert.equals(2, #msgs)
        assert.same({ user = "alice" }, msgs[1].payload)
        assert.equals(1, msgs[2].payload.n)
        assert.equals("Default", msgs[1].partition)
        assert.equals(0, msgs[1].attempts)
        assert.same({}, c:pop("cl-1"))
    end)

    it("hands back each payload's JSON text as sent with raw", function()
        local texts = { '{"a":"}\\"{[","payload":12345678901234567890}',
                        "1.50", '"\\\\"' }
        local raws = {}
        for i, t in ipairs(texts) do raws[i] = client.raw(t) end
        assert.equals(3, c:push("cl-raw", raws,
                                { partition = 'payload":' }))
        local msgs = assert(c:pop("cl-raw", { batch = 10, raw = true }))
        local got = {}
        for i, m in ipairs(msgs) do got[i] = m.payload end
        assert.same(texts, got)
        assert.equals('payload":', msgs[1].partition)
    end)

    it("returns one value on success, and no null but a payload's",
       function()
        local function one(...)
            assert.equals(1, select("#", ...))
            return (...)
        end
        one(c:push("cl-one", { client.raw('{"n":null}'), client.raw("null") }))
        local msgs = one(c:pop("cl-one", { group = "g", batch = 2 }))
        assert.equals(client.null, msgs[1].payload.n)
        assert.equals(client.null, msgs[2].payload)
        one(c:ack("cl-one", { msgs[1].id }, { group = "g" }))
        -- The depth read's group is a JSON null on the wire; an off
        -- windowBuffer is {ms: 0, count: 0}, as Queen publishes it.
        assert.is_nil(one(c:depth("cl-one")).group)
        local listing = one(c:queues())
        for _, q in ipairs(listing.queues) do
            assert.same({ ms = 0, count = 0 }, q.options.windowBuffer)
        end
        one(c:system())
        one(c:metering())
        assert.equals(1, one(c:reset("cl-one")))
        one(c:configure("cl-one", { maxLength = 5 }))
        one(c:delete("cl-one"))
        one(c:request("GET", "/health"))
    end)

    it("acks what a group popped, each id with its outcome", function()
        c:push("cl-2", { 1, 2 }, { partition = "p" })
        local msgs = c:pop("cl-2", { group = "g", batch = 2 })
        local results = assert(c:ack("cl-2", {
            msgs[1].id, { id = msgs[2].id, status = "retry" },
            "e:00000000:p:1",
        }, { group = "g" }))
        assert.same({ "acked", "redelivered", "stale" },
                    { results[1].outcome, results[2].outcome,
                      results[3].outcome })
        assert.same({}, c:ack("cl-2", {}, { group = "g" }))
    end)

    it("long-polls until a push arrives on another connection", function()
        local other = client.new({ url = c.url })
        -- The push goes first on its own connection; a parked pop on this
        -- one then finds it, or would wait for it up to its timeout.
        other:push("cl-3", { "late" })
        local msgs = assert(c:pop("cl-3", { wait = true, timeout = 2000 }))
        assert.equals("late", msgs[1].payload)
        local t0 = os.time()
        assert.same({}, c:pop("cl-3", { wait = true, timeout = 300 }))
        assert.is_true(os.time() - t0 <= 2)
        other:close()
    end)

    it("configures, reads depth and the listing, resets and deletes",
       function()
        local stored = assert(c:configure("cl-4", { maxLength = 2,
                                                    policy = "dropOldest" }))
        assert.equals(2, stored.options.maxLength)
        assert.equals(2, c:push("cl-4", { 1, 2 }))
        assert.equals(1, c:push("cl-4", { 3 })) -- drops the oldest
        local depth = assert(c:depth("cl-4"))
        assert.equals("declared", depth.tier)
        assert.equals(2, depth.pending)
        local listing = assert(c:queues())
        local seen
        for _, q in ipairs(listing.queues) do
            if q.queue == "cl-4" then seen = q end
        end
        assert.equals(1, seen.drops.bounds)
        assert.equals(2, c:reset("cl-4"))
        local gone = assert(c:delete("cl-4"))
        assert.is_true(gone.deleted)
        assert.is_true(gone.declared)
    end)

    it("turns {error, code} answers into typed errors", function()
        local ok, err = c:pop("")
        assert.is_nil(ok)
        assert.is_true(client.is_error(err))
        assert.equals("ephemeral_bad_request", err.code)
        assert.equals(400, err.status)

        c:push("cl-5", { 1, 2, 3 })
        ok, err = c:push("cl-5", { 4 })
        assert.is_nil(ok)
        assert.equals("queue_full", err.code)
        assert.equals(429, err.status)
        assert.is_true(client.retryable(err))
        -- The broker sends no Retry-After with it: the client's hint.
        assert.equals(client.RETRY_AFTER_S, err.retry_after)

        ok, err = c:depth("cl-never")
        assert.is_nil(ok)
        assert.equals("ephemeral_queue_not_found", err.code)
        assert.is_false(client.retryable(err))
        assert.is_nil(err.retry_after)
        assert.matches("ephemeral_queue_not_found %(404%)", tostring(err))
    end)

    it("carries Retry-After on the errors that have one", function()
        local paused = client.new({ url = c.url })
        assert(paused:request("POST", "/api/v1/system/ephemeral",
                              '{"enabled":false,"retryAfter":7}'))
        local ok, err = paused:push("cl-6", { 1 })
        assert(paused:request("POST", "/api/v1/system/ephemeral",
                              '{"enabled":true}'))
        assert.is_nil(ok)
        assert.equals("ephemeral_disabled", err.code)
        assert.equals(7, err.retry_after)
        paused:close()
    end)

    it("reports a 404 off the depth read as ephemeral_unsupported",
       function()
        -- A server that predates the routes: answers a request 404 (and
        -- a 400 if the client's Host leaves out the port, RFC 9110 7.2).
        local port = daemon.free_port()
        local script = os.tmpname()
        local f = assert(io.open(script, "w"))
        f:write(([[
local s = assert(require("socket").bind("127.0.0.1", PORT))
s:settimeout(10) -- gone on its own if nobody comes
local c = assert(s:accept())
local host
repeat
    local l = c:receive("*l")
    host = host or l:match("^Host: (.*)$")
until l == ""
if host == "127.0.0.1:PORT" then
    c:send("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")
else
    c:send("HTTP/1.1 400 Bad Request\r\nContent-Length: 8\r\n\r\nbad host")
end
c:close()
]]):gsub("PORT", tostring(port)), "\n")
        f:close()
        local server = io.popen("luajit " .. script .. " &")
        local old = client.new({ url = "http://127.0.0.1:" .. port })
        local ok, err
        for _ = 1, 100 do -- until the server listens
            ok, err = old:queues()
            if err.code ~= "connection_failed" then break end
            require("socket").sleep(0.02)
        end
        server:close()
        os.remove(script)
        assert.is_nil(ok)
        assert.equals("ephemeral_unsupported", err.code)
        assert.equals(404, err.status)
    end)

    it("reports a broker it cannot reach as connection_failed", function()
        local nobody = client.new({ url = "http://127.0.0.1:1", timeout = 1 })
        local ok, err = nobody:queues()
        assert.is_nil(ok)
        assert.equals("connection_failed", err.code)
        assert.truthy(err.message:find("http://127.0.0.1:1", 1, true))
        assert.equals(client.RETRY_AFTER_S, err.retry_after)
    end)

    it("reconnects when the broker closed the kept connection", function()
        local brief = daemon.start({ env = {
            QUEEN_EPHEMERAL_IDLE_TIMEOUT_S = "1" } })
        local k = client.new({ url = "http://127.0.0.1:" .. brief.port })
        assert.equals(1, k:push("cl-7", { 1 }))
        -- The broker closes the idle socket: the scrape's own is left.
        brief:await_metric("\nqueen_ephemeral_connections (%d+)", 1, 5)
        assert.equals(1, k:push("cl-7", { 2 }))
        assert.equals(2, #k:pop("cl-7", { batch = 5 }))
        k:close()
        brief:stop()
    end)
end)
