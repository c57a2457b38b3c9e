-- Every refusal of the ladder provoked through real HTTP, with its status,
-- its code and Retry-After where the contract gives one; and the outer
-- refusal winning when two apply.
local daemon = require("e2e.daemon")
local helper = require("helper")

local T = "cccccccc-cccc-cccc-cccc-cccccccccccc"
local TH = { ["x-queen-tenant"] = T }
local SWITCH = "/api/v1/system/ephemeral"

local function grant(tenant, cols)
    daemon.sql("DELETE FROM queen.ephemeral_quota WHERE tenant_id = '"
               .. tenant .. "'")
    daemon.sql("INSERT INTO queen.ephemeral_quota (tenant_id, enabled, "
               .. "max_bytes, max_queues, max_msgs_per_sec) VALUES ('"
               .. tenant .. "', " .. (cols.enabled == false and "false"
                                      or "true") .. ", "
               .. (cols.max_bytes or "NULL") .. ", "
               .. (cols.max_queues or "NULL") .. ", "
               .. (cols.rate or "NULL") .. ")")
end

describe("refusals", function()
    after_each(function()
        daemon.sql("TRUNCATE queen.ephemeral_quota")
    end)

    it("rate_limited: 429 with an honest Retry-After", function()
        local d = daemon.start({ env = { QUEEN_EPHEMERAL_RATE = "2",
                                         QUEEN_EPHEMERAL_BURST = "4" } })
        finally(function() d:stop() end)
        assert.equals(201, d:push("r", { "1", "2", "3", "4" }).status)
        local res = d:push("r", { "1", "2", "3", "4" })
        assert.refused_with("rate_limited", res)
        -- Four tokens short at two per second: two seconds.
        assert.equals("2", res.headers["retry-after"])
        assert.equals(4, d:depth("r").json.pending)
        daemon.sleep(0.6) -- elapsed time: a token's refill at two a second
        assert.equals(201, d:push("r", { "5" }).status)
    end)

    it("rate_limited: a rate of 1 is 1 message per second", function()
        local d = daemon.start({ env = { QUEEN_EPHEMERAL_RATE = "1",
                                         QUEEN_EPHEMERAL_BURST = "1" } })
        finally(function() d:stop() end)
        assert.equals(201, d:push("r1", { "1" }).status)
        local res = d:push("r1", { "2" })
        assert.refused_with("rate_limited", res)
        assert.equals("the tenant is over its rate of 1 message per second",
                      res.json.error)
        assert.equals("1", res.headers["retry-after"])
    end)

    it("ephemeral_bad_request: a body cut short inside messages is not JSON",
       function()
        local d = daemon.start()
        finally(function() d:stop() end)
        local body = '{"queue":"j","messages":[{"payload":1},{"payload":'
        local res = d:request("POST", "/api/v1/ephemeral/push", body)
        assert.refused_with("ephemeral_bad_request", res)
        assert.equals("the body is not valid JSON: it ends at byte " .. #body
                      .. ", inside a value (cut short?)", res.json.error)
        -- Cut inside a payload's string, as a long body mostly is.
        body = '{"queue":"j","messages":[{"payload":"a long te'
        res = d:request("POST", "/api/v1/ephemeral/push", body)
        assert.equals("the body is not valid JSON: it ends at byte " .. #body
                      .. ", inside a value (cut short?)", res.json.error)
        res = d:request("POST", "/api/v1/ephemeral/push",
                        '{"queue":"j","messages":[{"payload":1} {}]}')
        assert.refused_with("ephemeral_bad_request", res)
        assert.equals("the body is not valid JSON at byte 39", res.json.error)
        -- What is JSON but not an array still says so.
        res = d:request("POST", "/api/v1/ephemeral/push",
                        '{"queue":"j","messages":{}}')
        assert.equals("messages must be an array of {payload}",
                      res.json.error)
    end)

    it("rate_limited: a grant's rate is its burst too", function()
        grant(T, { rate = 5 })
        local d = daemon.start({ db = true, env = {
            QUEEN_TENANCY_HEADER = "true" } })
        finally(function() d:stop() end)
        for i = 1, 5 do
            assert.equals(201, d:push("g5", { tostring(i) }, nil, TH).status)
        end
        local res = d:push("g5", { "6" }, nil, TH)
        assert.refused_with("rate_limited", res)
        assert.equals("1", res.headers["retry-after"])
        assert.equals(5, d:request("GET", "/api/v1/ephemeral/queues/g5/depth",
                                   nil, TH).json.pending)
        -- An empty push costs nothing, whatever the bucket holds.
        assert.equals(201, d:push("g5", {}, nil, TH).status)
    end)

    it("rate_limited: one push above a grant's burst passes from a full "
       .. "bucket, and the next waits out its debt", function()
        grant(T, { rate = 5 })
        local d = daemon.start({ db = true, env = {
            QUEEN_TENANCY_HEADER = "true" } })
        finally(function() d:stop() end)
        local twelve = {}
        for i = 1, 12 do twelve[i] = tostring(i) end
        -- Five a second, a burst of five: a push of 12 from a full bucket
        -- passes (as the contract's 429 promises a retry will) and leaves
        -- it 7 in debt.
        assert.equals(201, d:push("big", twelve, nil, TH).status)
        local res = d:push("big", twelve, nil, TH)
        assert.refused_with("rate_limited", res)
        assert.equals("the tenant is over its rate of 5 messages per "
                      .. "second; this push costs 12, more than its burst "
                      .. "of 5: it passes from a full bucket", res.json.error)
        -- -7 to a full 5 at five a second: 2.4 s, said as 3.
        assert.equals("3", res.headers["retry-after"])
        assert.equals(12, d:request("GET",
            "/api/v1/ephemeral/queues/big/depth", nil, TH).json.pending)
    end)

    it("ephemeral_quota_exceeded: the tenants' default queue allowance",
       function()
        local d = daemon.start({ env = {
            QUEEN_EPHEMERAL_TENANT_MAX_QUEUES = "2" } })
        finally(function() d:stop() end)
        assert.equals(201, d:push("a1", { "1" }).status)
        assert.equals(200, d:pop("queue=a2").status)
        local res = d:push("a3", { "1" })
        assert.refused_with("ephemeral_quota_exceeded", res)
        assert.equals("at an ephemeral allowance: the tenant's queues "
                      .. "(limit 2)", res.json.error)
        assert.refused_with("ephemeral_quota_exceeded", d:pop("queue=a3"))
        assert.refused_with("ephemeral_quota_exceeded", d:request("POST",
            "/api/v1/ephemeral/configure", '{"queue":"a3"}'))
        -- The queues it holds still work.
        assert.equals(201, d:push("a2", { "2" }).status)
        assert.equals(2, d:request("GET", "/api/v1/ephemeral/queues")
                          .json.count)
    end)

    it("ephemeral_disabled: 503 with Retry-After on every family route",
       function()
        local d = daemon.start()
        finally(function() d:stop() end)
        d:push("k", { "1" })
        local res = d:request("POST", SWITCH,
            '{"enabled":false,"retryAfter":42,"reason":"maintenance"}')
        assert.equals(200, res.status)
        assert.is_false(res.json.enabled)
        for _, r in ipairs({
            { "POST", "/api/v1/ephemeral/push",
              '{"queue":"k","messages":[{"payload":1}]}' },
            { "GET", "/api/v1/ephemeral/pop?queue=k" },
            { "POST", "/api/v1/ephemeral/ack", '{"queue":"k","acks":[]}' },
            { "POST", "/api/v1/ephemeral/configure", '{"queue":"k"}' },
            { "POST", "/api/v1/ephemeral/reset", '{"queue":"k"}' },
            { "DELETE", "/api/v1/ephemeral/queue/k" },
            { "GET", "/api/v1/ephemeral/queues" },
            { "GET", "/api/v1/ephemeral/queues/k/depth" },
        }) do
            res = d:request(r[1], r[2], r[3])
            assert.refused_with("ephemeral_disabled", res)
            assert.equals("42", res.headers["retry-after"], r[2])
            assert.equals("maintenance", res.json.error)
        end
        -- The switch itself stays reachable, and nothing was lost.
        assert.is_false(d:request("GET", SWITCH).json.enabled)
        assert.equals(200, d:request("POST", SWITCH, '{"enabled":true}').status)
        assert.equals(1, d:depth("k").json.pending)
    end)

    it("a paused surface never leaks a quota answer", function()
        -- Header identities are not admin: the operator's token is.
        local function opts()
            return { db = true, env = { QUEEN_TENANCY_HEADER = "true" },
                     args = { "--policy-dir " .. helper.root
                              .. "/spec/e2e/policies/operator" } }
        end
        local d = daemon.start(opts())
        finally(function() d:stop() end)
        grant(T, { max_bytes = 1 })
        -- Grants load at boot and refresh; restart to read this one now.
        d:stop()
        d = daemon.start(opts())
        assert.refused_with("ephemeral_quota_exceeded",
                            d:push("big", { '"xyz"' }, nil, TH))
        assert.equals(200, d:request("POST", SWITCH, '{"enabled":false}',
            { ["x-queen-tenant"] = T, Authorization = "Bearer operator" })
            .status)
        local res = d:push("big", { '"xyz"' }, nil, TH)
        assert.refused_with("ephemeral_disabled", res)
        assert.equals("30", res.headers["retry-after"])
        -- Nor does it say whether an ungranted tenant exists.
        assert.refused_with("ephemeral_disabled", d:push("q", { "1" }, nil,
            { ["x-queen-tenant"] = "dddddddd-dddd-dddd-dddd-dddddddddddd" }))
    end)

    it("feature_gated: 403 without a grant when grants are required",
       function()
        grant(T, {})
        grant("eeeeeeee-eeee-eeee-eeee-eeeeeeeeeeee", { enabled = false })
        local d = daemon.start({ db = true, env = {
            QUEEN_TENANCY_HEADER = "true" } })
        finally(function() d:stop() end)
        assert.equals(201, d:push("g", { "1" }, nil, TH).status)
        assert.refused_with("feature_gated", d:push("g", { "1" }, nil,
            { ["x-queen-tenant"] = "dddddddd-dddd-dddd-dddd-dddddddddddd" }))
        assert.refused_with("feature_gated", d:request("GET",
            "/api/v1/ephemeral/queues", nil,
            { ["x-queen-tenant"] = "eeeeeeee-eeee-eeee-eeee-eeeeeeeeeeee" }))
    end)

    it("ephemeral_quota_exceeded: the tenant's bytes and queues", function()
        -- Bytes are the footprint (docs/architecture.md): the queue, its
        -- consumer, its partition and one message of ten bytes take about
        -- 830, and a second message passes 850.
        grant(T, { max_bytes = 850, max_queues = 1 })
        local d = daemon.start({ db = true, env = {
            QUEEN_TENANCY_HEADER = "true" } })
        finally(function() d:stop() end)
        assert.equals(200, d:pop("queue=one", TH).status)
        assert.equals(201, d:push("one", { '"12345678"' }, nil, TH).status)
        local res = d:push("one", { '"12345678"' }, nil, TH)
        assert.refused_with("ephemeral_quota_exceeded", res)
        assert.equals("at an ephemeral allowance: the tenant's bytes "
                      .. "(limit 850)", res.json.error)
        -- A second queue, by push, pop or configure, is past the allowance.
        assert.refused_with("ephemeral_quota_exceeded",
                            d:push("two", { "1" }, nil, TH))
        -- A new queue's names would pass the bytes too: both are named.
        res = d:pop("queue=two", TH)
        assert.refused_with("ephemeral_quota_exceeded", res)
        assert.equals("at an ephemeral allowance: the tenant's bytes (limit "
                      .. "850); the tenant's queues (limit 1)", res.json.error)
        assert.refused_with("ephemeral_quota_exceeded", d:request("POST",
            "/api/v1/ephemeral/configure", '{"queue":"two"}', TH))
        -- The existing queue still works.
        assert.equals(200, d:pop("queue=one&autoAck=true", TH).status)
        assert.equals("1", d:request("GET", "/api/v1/ephemeral/queues", nil,
                                     TH).json.count .. "")
    end)

    it("ephemeral_quota_exceeded: a queue's partitions and groups", function()
        local d = daemon.start({ env = { QUEEN_EPHEMERAL_MAX_PARTITIONS = "2",
                                         QUEEN_EPHEMERAL_MAX_GROUPS = "2" } })
        finally(function() d:stop() end)
        assert.equals(201, d:push("caps", { "1" }, "p1").status)
        assert.equals(201, d:push("caps", { "1" }, "p2").status)
        local PARTS = "at an ephemeral allowance: the queue's partitions "
                      .. "(QUEEN_EPHEMERAL_MAX_PARTITIONS)"
        local res = d:push("caps", { "1" }, "p3")
        assert.refused_with("ephemeral_quota_exceeded", res)
        assert.equals(PARTS, res.json.error)
        res = d:pop("queue=caps&partition=p3")
        assert.refused_with("ephemeral_quota_exceeded", res)
        assert.equals(PARTS, res.json.error)
        assert.equals(201, d:push("caps", { "2" }, "p1").status)
        assert.equals(200, d:pop("queue=caps&group=a").status)
        assert.equals(200, d:pop("queue=caps&group=b").status)
        res = d:pop("queue=caps&group=c")
        assert.refused_with("ephemeral_quota_exceeded", res)
        assert.equals("at an ephemeral allowance: the queue's named groups "
                      .. "(QUEEN_EPHEMERAL_MAX_GROUPS)", res.json.error)
        -- Queue mode is not a named group, and known groups still pop.
        assert.equals(200, d:pop("queue=caps").status)
        assert.equals(200, d:pop("queue=caps&group=a").status)
        -- Nothing refused was created (queue mode is listed by its name).
        local depth = d:depth("caps").json
        assert.equals(2, #depth.partitions)
        assert.same({ "__QUEUE_MODE__", "a", "b" },
                    { depth.groups[1].group, depth.groups[2].group,
                      depth.groups[3].group })
        assert.is_nil(depth.groups[4])
    end)

    it("rate_limited: 429 past the tenant's parked-pop slots", function()
        local d = daemon.start({ env = { QUEEN_EPHEMERAL_MAX_PARKED = "1" } })
        finally(function() d:stop() end)
        local c = d:connect()
        c:send(daemon.format("GET",
            "/api/v1/ephemeral/pop?queue=p&wait=true&timeout=5000"))
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
        local res = d:pop("queue=p&wait=true&timeout=5000")
        assert.refused_with("rate_limited", res)
        assert.equals("1", res.headers["retry-after"])
        -- A pop that finds nothing but does not wait needs no slot.
        assert.equals(200, d:pop("queue=p").status)
        c:close()
    end)

    it("unauthorized and forbidden from the bearer-tokens example",
       function()
        local d = daemon.start({ args = { "--policy-dir "
            .. helper.root .. "/examples/policies/bearer-tokens" } })
        finally(function() d:stop() end)
        local function as(token)
            return token and { Authorization = "Bearer " .. token } or nil
        end
        assert.refused_with("unauthorized",
                            d:push("b", { "1" }, nil, as(nil)), 401)
        assert.refused_with("unauthorized",
                            d:push("b", { "1" }, nil, as("wrong")), 401)
        assert.equals(201, d:push("b", { "1" }, nil,
                                  as("producer-token")).status)
        -- write-only may push but not pop; read-only may only read.
        assert.refused_with("forbidden", d:pop("queue=b", as("producer-token")),
                            403)
        assert.refused_with("forbidden", d:push("b", { "1" }, nil,
                                                as("dashboard-token")), 403)
        assert.equals(1, d:request("GET", "/api/v1/ephemeral/queues/b/depth",
                                   nil, as("dashboard-token")).json.pending)
        -- The system routes want admin.
        assert.refused_with("forbidden", d:request("POST", SWITCH,
            '{"enabled":false}', as("other-tenant-token")), 403)
        assert.equals(200, d:request("GET", SWITCH, nil,
                                     as("admin-token")).status)
        -- The token's tenant is the tenant: another token sees nothing.
        assert.equals(0, d:request("GET", "/api/v1/ephemeral/queues", nil,
                                   as("other-tenant-token")).json.count)
    end)

    it("logs who got which code with QUEEN_EPHEMERAL_LOG_REFUSALS, not without",
       function()
        -- busted keeps one finally per test: it stops both.
        local quiet, d
        finally(function()
            if d then d:stop() end
            quiet:stop()
        end)
        quiet = daemon.start({ env = { QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "1" } })
        quiet:push("lq", { "1", "2" })
        d = daemon.start({ env = { QUEEN_TENANCY_HEADER = "true",
                                   QUEEN_EPHEMERAL_LOG_REFUSALS = "true" } })
        d:push("lg", { "1" }, nil, TH)
        d:request("GET", "/nowhere")
        local c = d:connect()
        c:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: x\r\n"
               .. "Content-Length: 999999999999\r\n\r\n")
        c:receive()
        c:close()
        assert.refused_with("unauthorized", d:request("GET",
            "/api/v1/ephemeral/queues", nil, { ["x-queen-tenant"] = "bad" }))
        local log = d:await_log("status=413", 5)
        assert.matches("level=info event=refused code=feature_gated "
                       .. "error=\"the tenant is not granted ephemeral queues\" "
                       .. "route=push status=403 tenant=" .. T:gsub("%-", "%%-"),
                       log)
        assert.matches("event=refused code=route_not_found error=\"no route "
                       .. "/nowhere\" status=404\n", log)
        assert.matches("event=refused code=unauthorized error=[^\n]* "
                       .. "route=queues status=401\n", log)
        assert.matches("event=refused status=413 code=ephemeral_bad_request", log)
        assert.falsy(quiet:read_log():find("event=refused", 1, true))
    end)
end)
