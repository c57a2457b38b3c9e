-- HTTP/1.1 as the broker speaks it: keep-alive, pipelining, bodies, limits.
local daemon = require("e2e.daemon")

describe("http", function()
    local d
    lazy_setup(function()
        d = daemon.start({ env = {
            QUEEN_EPHEMERAL_MAX_BODY_BYTES = "4096",
            QUEEN_EPHEMERAL_MAX_HEADER_BYTES = "2048",
        } })
    end)
    lazy_teardown(function() d:stop() end)

    it("keeps a connection alive across requests", function()
        local c = d:connect()
        for _ = 1, 3 do
            local res = c:request("GET", "/api/v1/ephemeral/queues")
            assert.equals(200, res.status)
        end
        c:close()
    end)

    it("answers pipelined requests in order", function()
        local c = d:connect()
        local raw = {}
        for i = 1, 5 do
            raw[i] = daemon.format("POST", "/api/v1/ephemeral/push",
                '{"queue":"pipe","messages":[{"payload":' .. i .. '}]}')
        end
        raw[6] = daemon.format("GET", "/api/v1/ephemeral/pop?queue=pipe&batch=10")
        c:send(table.concat(raw))
        for _ = 1, 5 do assert.equals(201, c:receive().status) end
        local res = c:receive()
        assert.equals(5, #res.json.messages)
        for i = 1, 5 do assert.equals(i, res.json.messages[i].payload) end
        c:close()
    end)

    it("holds requests pipelined behind a parked pop until it is answered",
       function()
        local c = d:connect()
        c:send(daemon.format("GET",
                   "/api/v1/ephemeral/pop?queue=behind&wait=true&timeout=300")
               .. daemon.format("GET", "/api/v1/ephemeral/queues"))
        local t0 = daemon.now()
        local first = c:receive()
        assert.equals(0, #first.json.messages)
        assert.is_true(daemon.now() - t0 >= 0.25)
        assert.equals(200, c:receive().status)
        c:close()
    end)

    it("sends Content-Type and Content-Length on every answer", function()
        for _, r in ipairs({
            { "GET", "/api/v1/ephemeral/queues" },
            { "GET", "/nowhere" },
            { "POST", "/api/v1/ephemeral/push", "{" },
        }) do
            local res = d:request(r[1], r[2], r[3])
            assert.equals("application/json", res.headers["content-type"])
            assert.equals(#res.body, tonumber(res.headers["content-length"]))
        end
    end)

    it("answers 404 outside the API and 405 with Allow for a wrong method",
       function()
        local res = d:request("GET", "/api/v1/other")
        assert.refused_with("route_not_found", res)
        for _, path in ipairs({ "/api/v1/ephemeral/queues/q",
                                "/api/v1/ephemeral/nowhere", "/" }) do
            assert.refused_with("route_not_found", d:request("GET", path))
        end
        res = d:request("GET", "/api/v1/ephemeral/push")
        assert.equals(405, res.status)
        assert.equals("POST", res.headers["allow"])
        assert.refused_with("ephemeral_bad_request", res, 405)
        res = d:request("POST", "/api/v1/ephemeral/queue/x")
        assert.equals(405, res.status)
        assert.equals("DELETE", res.headers["allow"])
    end)

    it("reads chunked request bodies", function()
        local c = d:connect()
        local body = '{"queue":"chunky","messages":[{"payload":"abc"}]}'
        c:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\n"
               .. "Content-Type: application/json\r\n"
               .. "Transfer-Encoding: chunked\r\n\r\n"
               .. ("%x\r\n%s\r\n"):format(10, body:sub(1, 10))
               .. ("%x\r\n%s\r\n"):format(#body - 10, body:sub(11))
               .. "0\r\n\r\n")
        local res = c:receive()
        assert.equals(201, res.status)
        assert.equals(1, res.json.pushed)
        c:close()
        assert.equals(1, d:depth("chunky").json.pending)
    end)

    it("reads no identity from a chunked body's trailer fields", function()
        -- RFC 9110 6.5.1: trailers are not headers. A proxy that checks
        -- or sets the head's identity does not look past the body, so a
        -- tenant (or Authorization) read from a trailer is the client's
        -- own choice of identity.
        local t = daemon.start({ env = {
            QUEEN_TENANCY_HEADER = "true",
            QUEEN_EPHEMERAL_REQUIRE_GRANT = "false",
        } })
        finally(function() t:stop() end)
        local tenant = "00000000-0000-0000-0000-0000000000aa"
        local body = '{"queue":"trailed","messages":[{"payload":1}]}'
        local c = t:connect()
        c:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\n"
               .. "Content-Type: application/json\r\n"
               .. "Transfer-Encoding: chunked\r\n\r\n"
               .. ("%x\r\n%s\r\n"):format(#body, body)
               .. "0\r\nX-Queen-Tenant: " .. tenant .. "\r\n\r\n")
        assert.equals(201, c:receive().status)
        c:close()
        local mine = t:request("GET", "/api/v1/ephemeral/queues", nil,
                               { ["X-Queen-Tenant"] = tenant })
        assert.equals(0, mine.json.count)
        assert.equals(1, t:depth("trailed").json.pending)
    end)

    it("answers 413 past the body limit and appends nothing", function()
        local big = ('{"queue":"big","messages":[{"payload":"%s"}]}')
            :format(("x"):rep(5000))
        local res = d:request("POST", "/api/v1/ephemeral/push", big)
        assert.equals(413, res.status)
        assert.refused_with("ephemeral_bad_request", res, 413)
        assert.equals("the request body is over 4096 bytes "
                      .. "(QUEEN_EPHEMERAL_MAX_BODY_BYTES)", res.json.error)
        assert.equals(404, d:depth("big").status)
    end)

    it("answers 413 for a chunked body past the limit", function()
        local c = d:connect()
        local chunk = ("y"):rep(3000)
        c:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\n"
               .. "Transfer-Encoding: chunked\r\n\r\n"
               .. ("%x\r\n%s\r\n"):format(#chunk, chunk)
               .. ("%x\r\n%s\r\n"):format(#chunk, chunk))
        assert.equals(413, c:receive().status)
        c:close()
    end)

    it("answers 413 when a chunked body's framing runs past its bound",
       function()
        -- One byte of data per chunk behind 3,000 bytes of extension: the
        -- data stays under the limit, the raw message does not (the
        -- bound is the header limit plus twice the body's).
        local c = d:connect()
        c:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\n"
               .. "Transfer-Encoding: chunked\r\n\r\n")
        local chunk = "1;ext=" .. ("e"):rep(3000) .. "\r\n{\r\n"
        for _ = 1, 4 do c:send(chunk) end
        local res = c:receive()
        assert.equals(413, res.status)
        assert.refused_with("ephemeral_bad_request", res, 413)
        assert.equals("the chunked request is over 10240 bytes with its "
                      .. "framing (QUEEN_EPHEMERAL_MAX_HEADER_BYTES plus "
                      .. "twice QUEEN_EPHEMERAL_MAX_BODY_BYTES)",
                      res.json.error)
        c:close()
    end)

    it("answers 413 to a chunked message past its bound sent whole",
       function()
        -- The same bound, the message complete in one send (one read,
        -- on loopback): checked only where a read ended, it was served.
        local body = '{"queue":"whole","messages":[]}'
        local framed = {}
        for i = 1, #body do
            framed[i] = "1;ext=" .. ("e"):rep(500) .. "\r\n"
                        .. body:sub(i, i) .. "\r\n"
        end
        local c = d:connect()
        c:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\n"
               .. "Content-Type: application/json\r\n"
               .. "Transfer-Encoding: chunked\r\n\r\n"
               .. table.concat(framed) .. "0\r\n\r\n")
        local res = c:receive()
        assert.equals(413, res.status)
        assert.refused_with("ephemeral_bad_request", res, 413)
        c:close()
    end)

    it("answers 431 past the header limit", function()
        local res = d:request("GET", "/api/v1/ephemeral/queues", nil,
                              { ["X-Filler"] = ("z"):rep(3000) })
        assert.equals(431, res.status)
        assert.refused_with("ephemeral_bad_request", res, 431)
        assert.equals("the request head is over 2048 bytes "
                      .. "(QUEEN_EPHEMERAL_MAX_HEADER_BYTES)", res.json.error)
    end)

    -- A head of exactly n raw bytes, padded with what llhttp skips: spaces
    -- before a header's value, after the method, or blank lines before the
    -- request line (between pipelined requests).
    local function head_of(n, at)
        local function make(fill, pad)
            local host = "Host: t" .. ("z"):rep(pad) .. "\r\n\r\n"
            if at == "value" then
                return "GET /health HTTP/1.1\r\nX-Pad:" .. (" "):rep(fill)
                       .. "v\r\n" .. host
            elseif at == "method" then
                return "GET " .. (" "):rep(fill) .. "/health HTTP/1.1\r\n"
                       .. host
            end
            return ("\r\n"):rep(fill) .. "GET /health HTTP/1.1\r\n" .. host
        end
        local base = #make(0, 0)
        local unit = #make(1, 0) - base
        local fill = math.floor((n - base) / unit)
        local raw = make(fill, n - base - fill * unit)
        assert(#raw == n)
        return raw
    end

    it("counts every raw byte of a head against the header limit (431)",
       function()
        local first = "GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
        for _, at in ipairs({ "value", "method", "blank" }) do
            for _, before in ipairs({ "", first }) do
                local c = d:connect()
                c:send(before .. head_of(2048, at) .. before
                       .. head_of(2049, at))
                if before ~= "" then assert.equals(200, c:receive().status) end
                assert.equals(200, c:receive().status, at)
                if before ~= "" then assert.equals(200, c:receive().status) end
                local res = c:receive()
                assert.equals(431, res.status, at)
                assert.refused_with("ephemeral_bad_request", res, 431)
                assert.equals("the request head is over 2048 bytes "
                              .. "(QUEEN_EPHEMERAL_MAX_HEADER_BYTES)",
                              res.json.error)
                assert.equals("close", res.headers["connection"])
                assert.is_nil((c.sock:receive("*l")))
                c:close()
            end
        end
    end)

    it("answers 431 to a head of skipped bytes sent a piece at a time",
       function()
        -- Each piece under the limit: the head is counted, not the read.
        for _, p in ipairs({ { "GET", " " },
                             { "GET /health HTTP/1.1\r\nX-Pad:", " " },
                             { "", "\r\n" } }) do
            local c = d:connect()
            c:send(p[1])
            for _ = 1, 3 do c:send(p[2]:rep(1000 / #p[2])) end
            assert.equals(431, c:receive().status)
            c:close()
        end
    end)

    it("refuses conflicting framing headers (no request smuggling)",
       function()
        local c = d:connect()
        c:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\n"
               .. "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!")
        assert.equals(400, c:receive().status)
        c:close()
        c = d:connect()
        c:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\n"
               .. "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
               .. "0\r\n\r\n")
        assert.equals(400, c:receive().status)
        c:close()
    end)

    it("reads nothing as HTTP after an upgrade or a CONNECT, however "
       .. "plain (no requests smuggled through a tunnel)", function()
        local health = "GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
        for _, first in ipairs({
            "GET /health HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\n"
                .. "Upgrade: websocket\r\n\r\n",
            "CONNECT t:443 HTTP/1.1\r\nHost: t\r\n\r\n",
        }) do
            local c = d:connect()
            c:send(first .. health)
            assert.is_not_nil(c:receive())
            local res = c:receive()
            assert.equals(400, res.status)
            assert.equals("close", res.headers["connection"])
            c:close()
        end
    end)

    it("honours Connection: close", function()
        local c = d:connect()
        local res = c:request("GET", "/api/v1/ephemeral/queues", nil,
                              { Connection = "close" })
        assert.equals(200, res.status)
        assert.equals("close", res.headers["connection"])
        local line, err = c.sock:receive("*l")
        assert.is_nil(line)
        assert.equals("closed", err)
        c:close()
        -- Read plain (urllib's shape) or not, a request pipelined behind
        -- it is never served.
        for _, head in ipairs({ "Connection: close\r\n",
                                "Connection: keep-alive, close\r\n" }) do
            c = d:connect()
            c:send("GET /api/v1/ephemeral/queues HTTP/1.1\r\nHost: t\r\n"
                   .. head .. "\r\n"
                   .. "GET /api/v1/ephemeral/queues HTTP/1.1\r\n"
                   .. "Host: t\r\n\r\n")
            res = c:receive()
            assert.equals(200, res.status)
            assert.equals("close", res.headers["connection"])
            assert.is_nil((c.sock:receive("*l")))
            c:close()
        end
    end)

    it("closes the connection after a malformed request", function()
        local c = d:connect()
        c:send("GARBAGE\r\n\r\n")
        local res = c:receive()
        assert.equals(400, res.status)
        assert.is_nil((c.sock:receive("*l")))
        c:close()
    end)

    it("forgets a client that disconnects mid-request", function()
        local c = d:connect()
        c:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\n"
               .. "Content-Length: 100\r\n\r\n{\"queue\":")
        c:close()
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
    end)

    it("releases parked pops whose clients disconnect", function()
        local conns = {}
        for i = 1, 200 do
            conns[i] = d:connect()
            conns[i]:send(daemon.format("GET",
                "/api/v1/ephemeral/pop?queue=gone&wait=true&timeout=60000"))
        end
        -- Every parked request is on the wire before any socket closes.
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
        for i = 1, 200 do conns[i]:close() end
        d:await_parked(0)
        -- Had a dead waiter taken the message, this pop would find nothing.
        assert.equals(201, d:push("gone", { '"left"' }).status)
        local res = d:pop("queue=gone")
        assert.equals(1, #res.json.messages)
        assert.equals("left", res.json.messages[1].payload)
    end)

    it("sends 100 Continue to a client that expects it", function()
        local c = d:connect()
        local body = '{"queue":"cont","messages":[]}'
        c:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\n"
               .. "Content-Type: application/json\r\n"
               .. "Expect: 100-continue\r\nContent-Length: " .. #body
               .. "\r\n\r\n")
        local line = c.sock:receive("*l")
        assert.equals("HTTP/1.1 100 Continue", line)
        assert.equals("", c.sock:receive("*l"))
        c:send(body)
        assert.equals(201, c:receive().status)
        c:close()
    end)
end)
