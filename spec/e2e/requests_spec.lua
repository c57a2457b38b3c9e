-- What the broker reads of a request beyond its route: identity headers
-- given once, HEAD as a bodiless GET, and what a browser sends on a web
-- page's behalf (bodies that are not JSON, foreign origins).
local daemon = require("e2e.daemon")

local SWITCH = "/api/v1/system/ephemeral"
local QUEUES = "/api/v1/ephemeral/queues"

local function code(res) return res.json and res.json.code end

describe("requests", function()
    local d
    lazy_setup(function() d = daemon.start() end)
    lazy_teardown(function() d:stop() end)

    local function enabled()
        return d:request("GET", SWITCH).json.enabled
    end

    describe("identity headers", function()
        for _, name in ipairs({ "x-queen-tenant", "Authorization" }) do
            it("refuses a repeated " .. name .. " with 400 and closes",
               function()
                local c = d:connect()
                c:send("GET " .. QUEUES .. " HTTP/1.1\r\nHost: test\r\n"
                       .. name .. ": a\r\n" .. name:upper() .. ": b\r\n\r\n")
                local res = assert(c:receive())
                assert.equals(400, res.status)
                assert.equals("ephemeral_bad_request", code(res))
                assert.truthy(res.json.error:find(name, 1, true))
                assert.equals("close", res.headers.connection)
                c:close()
            end)
        end

        it("refuses whitespace between a header's name and its colon",
           function()
            local c = d:connect()
            c:send("GET " .. QUEUES .. " HTTP/1.1\r\nHost: test\r\n"
                   .. "x-queen-tenant : 00000000-0000-0000-0000-000000000002"
                   .. "\r\n\r\n")
            local res = assert(c:receive())
            assert.equals(400, res.status)
            assert.equals("ephemeral_bad_request", code(res))
            c:close()
        end)

        it("still takes one of each", function()
            local res = d:request("GET", QUEUES, nil, {
                Authorization = "Bearer x" })
            assert.equals(200, res.status)
        end)
    end)

    it("takes a target in absolute form, as RFC 9112 asks", function()
        local c = d:connect()
        -- A system route, strict about its parameters: its refusal of x
        -- says the query reached it.
        c:send("GET http://test/api/v1/system/queues?x HTTP/1.1\r\n"
               .. "Host: test\r\n\r\n"
               .. "GET http://test HTTP/1.1\r\nHost: test\r\n\r\n")
        local res = assert(c:receive())
        assert.equals(400, res.status) -- the route's own answer: no x
        assert.truthy(res.json.error:find("unknown parameter x", 1, true))
        res = assert(c:receive())
        assert.equals(404, res.status)
        assert.equals("route_not_found", code(res))
        assert.truthy(res.json.error:find("no route /", 1, true))
        c:close()
        assert.equals(200, d:request("GET", "HTTP://test" .. QUEUES).status)
    end)

    describe("HEAD", function()
        it("answers every read route as GET does, without the body",
           function()
            assert.equals(201, d:push("head", { "1" }).status)
            for _, path in ipairs({ QUEUES, "/api/v1/ephemeral/queues/head/"
                                    .. "depth", "/api/v1/ephemeral/queues/"
                                    .. "nothing/depth", "/dashboard",
                                    "/health", "/metrics", SWITCH }) do
                local c = d:connect()
                local get = c:request("GET", path)
                c:send(daemon.format("HEAD", path))
                local head = assert(c:receive(5, true))
                assert.equals(get.status, head.status)
                assert.equals(get.headers["content-type"],
                              head.headers["content-type"])
                if path ~= "/metrics" then -- its counters moved meanwhile
                    assert.equals(#get.body,
                                  tonumber(head.headers["content-length"]))
                end
                -- Nothing follows the headers: the next answer is next.
                local after = c:request("GET", "/health")
                assert.equals('{"status":"ok"}', after.body)
                c:close()
            end
        end)

        it("keeps pipelined answers in order", function()
            local c = d:connect()
            c:send(daemon.format("HEAD", QUEUES)
                   .. daemon.format("GET", QUEUES)
                   .. daemon.format("HEAD", "/health")
                   .. daemon.format("GET", "/health"))
            local head = assert(c:receive(5, true))
            local get = assert(c:receive())
            assert.equals(tonumber(head.headers["content-length"]),
                          #get.body)
            assert.truthy(get.json.queues)
            assert.equals(15, tonumber(assert(c:receive(5, true))
                                       .headers["content-length"]))
            assert.equals("ok", assert(c:receive()).json.status)
            c:close()
        end)

        it("is not a pop: 405, and nothing is taken", function()
            assert.equals(201, d:push("headpop", { "1" }).status)
            local c = d:connect()
            c:send(daemon.format("HEAD", "/api/v1/ephemeral/pop?queue="
                                         .. "headpop&autoAck=true"))
            local res = assert(c:receive(5, true))
            assert.equals(405, res.status)
            assert.equals("GET", res.headers.allow)
            c:close()
            assert.equals(1, d:depth("headpop").json.pending)
        end)

        it("lists HEAD where GET is allowed", function()
            local res = d:request("PUT", QUEUES)
            assert.equals(405, res.status)
            assert.equals("GET, HEAD", res.headers.allow)
        end)
    end)

    describe("bodies", function()
        local PAUSE = '{"enabled": false}'

        it("refuses a POST body that is not application/json", function()
            for _, ct in ipairs({ "text/plain", "text/plain;charset=UTF-8",
                                  "application/x-www-form-urlencoded",
                                  "multipart/form-data; boundary=x",
                                  "application/jsonp", "application/jsox",
                                  false }) do
                local res = d:request("POST", SWITCH, PAUSE,
                                      { ["Content-Type"] = ct })
                assert.equals(400, res.status)
                assert.equals("ephemeral_bad_request", code(res))
                assert.is_true(enabled())
            end
            local res = d:request("POST", "/api/v1/ephemeral/push",
                '{"queue":"typed","messages":[{"payload":1}]}',
                { ["Content-Type"] = "text/plain" })
            assert.equals(400, res.status)
            assert.equals(404, d:depth("typed").status)
        end)

        it("takes application/json with parameters, in any case", function()
            for _, ct in ipairs({ "application/json",
                                  "Application/JSON; charset=utf-8" }) do
                local res = d:request("POST", "/api/v1/ephemeral/push",
                    '{"queue":"typed","messages":[{"payload":1}]}',
                    { ["Content-Type"] = ct })
                assert.equals(201, res.status)
            end
        end)

        it("needs no Content-Type on a POST without a body", function()
            local res = d:request("POST", "/api/v1/system/policy/reload")
            assert.equals(200, res.status)
        end)
    end)

    describe("origins", function()
        local PAUSE = '{"enabled": false}'

        it("refuses a foreign Origin with 403, before the body is read",
           function()
            for _, origin in ipairs({ "http://evil.example", "null",
                                      "http://test:1" }) do
                local res = d:request("POST", SWITCH, PAUSE,
                                      { Origin = origin })
                assert.equals(403, res.status)
                assert.equals("forbidden", code(res))
                assert.is_true(enabled())
            end
        end)

        it("refuses what a page's <img> sends from another site", function()
            assert.equals(201, d:push("img", { "1" }).status)
            local res = d:request("GET", "/api/v1/ephemeral/pop?queue=img"
                                         .. "&autoAck=true", nil, {
                ["Sec-Fetch-Site"] = "cross-site",
                ["Sec-Fetch-Mode"] = "no-cors",
                ["Sec-Fetch-Dest"] = "image" })
            assert.equals(403, res.status)
            assert.equals("forbidden", code(res))
            assert.equals(1, d:depth("img").json.pending)
        end)

        it("takes its own origin", function()
            local res = d:request("GET", QUEUES, nil, {
                Origin = "http://test", ["Sec-Fetch-Site"] = "same-origin" })
            assert.equals(200, res.status)
            res = d:request("GET", QUEUES, nil, {
                Host = "broker.example:6632",
                Origin = "https://Broker.example:6632" })
            assert.equals(200, res.status)
        end)

        it("answers a paused surface first", function()
            assert.equals(200, d:request("POST", SWITCH, PAUSE).status)
            local res = d:request("GET", QUEUES, nil, {
                Origin = "http://evil.example" })
            assert.equals(503, res.status)
            assert.equals("ephemeral_disabled", code(res))
            d:request("POST", SWITCH, '{"enabled": true}')
        end)

        it("lets in the origins EPHD_ALLOWED_ORIGINS lists", function()
            local open = daemon.start({ env = {
                EPHD_ALLOWED_ORIGINS = "https://app.example,null" } })
            finally(function() open:stop() end)
            for _, origin in ipairs({ "https://app.example", "null" }) do
                local res = open:request("GET", QUEUES, nil, {
                    Origin = origin, ["Sec-Fetch-Site"] = "cross-site" })
                assert.equals(200, res.status)
            end
            assert.equals(403, open:request("GET", QUEUES, nil, {
                Origin = "https://evil.example" }).status)
        end)

        it("stops at boot on an EPHD_ALLOWED_ORIGINS it cannot use",
           function()
            local p = io.popen("EPHD_ALLOWED_ORIGINS=app.example timeout 5 "
                               .. require("helper").build
                               .. "/ephd --listen 127.0.0.1:0 2>&1; echo $?")
            local out = p:read("*a")
            p:close()
            assert.truthy(out:find("EPHD_ALLOWED_ORIGINS", 1, true))
            assert.truthy(out:find("\n1\n$") or out:find("\n2\n$"), out)
        end)
    end)
end)
