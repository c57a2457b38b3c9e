-- Hostile clients over real sockets: slow headers, slow bodies, idle
-- sockets, floods of malformed requests and of parked pops that vanish.
local socket = require("socket")
local daemon = require("e2e.daemon")

local function rss_kib(d)
    local f = io.open("/proc/" .. d.pid .. "/status")
    local text = f:read("*a")
    f:close()
    return tonumber(text:match("VmRSS:%s+(%d+)"))
end

local function raw_connect(d)
    local s = assert(socket.connect("127.0.0.1", d.port))
    s:settimeout(5)
    return s
end

describe("hostile clients", function()
    local d
    lazy_setup(function()
        d = daemon.start({ env = {
            QUEEN_EPHEMERAL_HEADER_TIMEOUT_MS = "1000",
            QUEEN_EPHEMERAL_BODY_TIMEOUT_MS = "1000",
            QUEEN_EPHEMERAL_IDLE_TIMEOUT_S = "2",
        } })
    end)
    lazy_teardown(function() d:stop() end)

    it("1,000 slow-loris connections neither delay a normal client nor "
       .. "outlive the header timeout", function()
        local slow = {}
        for i = 1, 1000 do
            slow[i] = raw_connect(d)
            slow[i]:send("GET /api/v1/ephemeral/queues HTTP/1.1\r\nHost: x\r\n")
        end
        -- The next header line arrives a byte at a time, too slowly.
        for i = 1, 1000 do slow[i]:send("X") end
        local t0 = daemon.now()
        local res = d:request("GET", "/api/v1/ephemeral/queues")
        assert.equals(200, res.status)
        assert.is_true(daemon.now() - t0 < 0.5, "a normal client waited")
        -- Each read waits for its 408, due a second after its headers began.
        local timed_out = 0
        for i = 1, 1000 do
            slow[i]:settimeout(5)
            local line = slow[i]:receive("*l")
            if line == "HTTP/1.1 408 Request Timeout" then
                timed_out = timed_out + 1
            end
            slow[i]:close()
        end
        assert.equals(1000, timed_out)
    end)

    it("answers a body that trickles past the body timeout with 408",
       function()
        local s = raw_connect(d)
        s:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: x\r\n"
               .. "Content-Length: 100\r\n\r\n{\"queue\":")
        s:settimeout(3)
        assert.equals("HTTP/1.1 408 Request Timeout", s:receive("*l"))
        s:close()
        assert.equals(404, d:depth("trickle").status)
    end)

    it("starts the header clock at a head's first byte, a blank line "
       .. "included, and blank lines do not restart it", function()
        -- About elapsed time (the header timeout is 1 s): the sleeps are
        -- the test.
        local s = raw_connect(d)
        s:send("\r\n")
        daemon.sleep(0.3)
        s:send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert.equals("HTTP/1.1 200 OK", s:receive("*l"))
        s:close()
        s = raw_connect(d)
        local t0 = daemon.now()
        local line
        repeat
            s:send("\r\n")
            s:settimeout(0.2)
            line = s:receive("*l")
        until line or daemon.now() - t0 > 3
        assert.equals("HTTP/1.1 408 Request Timeout", line)
        local took = daemon.now() - t0
        assert.is_true(took >= 0.9 and took < 2, took)
        s:close()
    end)

    it("holds no more of a head than its bound and a read, whatever "
       .. "llhttp skips", function()
        -- 16 MiB of spaces after the method, before a value, or of blank
        -- lines: the broker closes at the 64 KiB head limit, so the
        -- sender's buffers fill and the send fails, and its memory stays.
        local baseline = rss_kib(d)
        for _, p in ipairs({ { "GET", " " },
                             { "GET / HTTP/1.1\r\nX-Pad:", " " },
                             { "", "\r\n" } }) do
            local s = raw_connect(d)
            s:send(p[1])
            local ok = s:send(p[2]:rep(16 * 1024 * 1024 / #p[2]))
            assert.is_nil(ok, "the broker took 16 MiB of a head")
            s:close()
        end
        local grew = rss_kib(d) - baseline
        print(("\nrss grew %d KiB through 48 MiB of skipped head bytes")
              :format(grew))
        if os.getenv("EPHD_SANITIZED") then return end
        assert.is_true(grew < 4096, ("grew %d KiB"):format(grew))
    end)

    it("closes a connection idle past the idle timeout", function()
        local s = raw_connect(d)
        s:settimeout(4)
        local t0 = daemon.now()
        local line, err = s:receive("*l")
        assert.is_nil(line)
        assert.equals("closed", err)
        assert.is_true(daemon.now() - t0 >= 1.5)
        s:close()
    end)

    it("keeps every depth unchanged through 10,000 malformed requests",
       function()
        d:push("steady", { "1", "2", "3" })
        local bad_bodies = {
            '{"queue":"steady","messages":[{"payload":}]}',
            '{"queue":"steady","messages":[{"payload":1,"x":2}]}',
            '{"queue":"steady","messages":{}}',
            '{"queue":"steady\\u0001","messages":[{"payload":1}]}',
            '{"queue":"' .. ("s"):rep(600) .. '","messages":[]}',
            '{"queue":"steady","messages":[' .. ("["):rep(600)
                .. ("]"):rep(600) .. ']}',
            'null', '', '\0\0\0', '{"queue":"steady","messages":[1,]}',
        }
        local c = d:connect()
        local sent = 0
        while sent < 9000 do
            local batch = {}
            for i = 1, 100 do
                local body = bad_bodies[(sent + i) % #bad_bodies + 1]
                batch[i] = daemon.format("POST", "/api/v1/ephemeral/push",
                                         body)
            end
            c:send(table.concat(batch))
            for _ = 1, 100 do
                assert.equals(400, c:receive().status)
            end
            sent = sent + 100
        end
        c:close()
        local garbage = {
            "GARBAGE\r\n\r\n", "GET / HTTP/9.9\r\n\r\n",
            "POST /api/v1/ephemeral/push HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "GET /api/v1/ephemeral/pop?queue=steady HTTP/1.1\r\nHost: x\r\n"
                .. "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            ("A"):rep(5000) .. "\r\n\r\n",
        }
        for i = 1, 1000 do
            local s = raw_connect(d)
            s:send(garbage[i % #garbage + 1])
            local line = s:receive("*l")
            assert.truthy(line and line:find("^HTTP/1.1 4%d%d"), line)
            s:close()
        end
        assert.equals(3, d:depth("steady").json.pending)
        assert.equals(201, d:push("steady", { "4" }).status)
    end)

    it("returns to its memory baseline after 10,000 parked pops vanish",
       function()
        -- Warm up: the first wave grows the heap to its working size.
        local function wave(n)
            local conns = {}
            for i = 1, n do
                conns[i] = raw_connect(d)
                conns[i]:send(daemon.format("GET",
                    "/api/v1/ephemeral/pop?queue=inbox&wait=true"
                    .. "&timeout=60000"))
            end
            assert.equals(200,
                          d:request("GET", "/api/v1/ephemeral/queues").status)
            return conns
        end
        for _, s in ipairs(wave(1000)) do s:close() end
        d:await_parked(0)
        local baseline = rss_kib(d)
        local conns = wave(10000)
        local held = rss_kib(d)
        for _, s in ipairs(conns) do s:close() end
        -- Closes are processed as the broker reads the EOFs: wait for them.
        local limit = baseline * 1.1 + 1024
        local after, t0 = rss_kib(d), daemon.now()
        local patience = os.getenv("EPHD_SANITIZED") and 0 or 10
        while after > limit and daemon.now() - t0 < patience do
            daemon.sleep(0.1)
            after = rss_kib(d)
        end
        print(("\nrss KiB: baseline %d, 10,000 parked %d (%.2f KiB each), "
               .. "after %d"):format(baseline, held,
                                     (held - baseline) / 10000, after))
        -- Under the sanitizers, LeakSanitizer at the daemon's exit (see
        -- daemon:stop) stands in for resident size.
        if os.getenv("EPHD_SANITIZED") then return end
        assert.is_true(after <= limit,
                       ("after %d KiB vs baseline %d KiB"):format(after,
                                                                  baseline))
    end)
end)
