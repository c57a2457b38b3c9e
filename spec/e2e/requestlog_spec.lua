-- QUEEN_EPHEMERAL_LOG_REQUESTS: one `request` line per request the ladder
-- decided, with what `ephd policy replay` reads back, and never a payload
-- or a credential.
local daemon = require("e2e.daemon")
local helper = require("helper")

local BEARER = helper.root .. "/examples/policies/bearer-tokens"
local ADMIN = { Authorization = "Bearer admin-token" }
local OTHER = { Authorization = "Bearer other-tenant-token" }
local T1 = "11111111-1111-1111-1111-111111111111"

-- The request lines of a log, each as a table of its fields (values
-- unquoted by ephd.replay, the reader replay uses).
local function requests(d)
    local replay = require("ephd.replay")
    local lines = {}
    for text in d:read_log():gmatch("[^\n]+") do
        local r = replay.parse(text)
        if r then lines[#lines + 1] = r end
    end
    return lines
end

describe("the request log", function()
    it("logs each decided request: names and numbers, no payload or credential",
       function()
        local d = daemon.start({
            args = { "--policy-dir " .. BEARER },
            env = { QUEEN_EPHEMERAL_LOG_REQUESTS = "true",
                    QUEEN_EPHEMERAL_RATE = "1", QUEEN_EPHEMERAL_BURST = "2" } })
        finally(function() d:stop() end)
        assert.equals(201, d:push("orders", { '"secret-payload"', "2" },
                                  "p 1", ADMIN).status)
        assert.refused_with("rate_limited",
                            d:push("orders", { "3" }, nil, ADMIN))
        assert.equals(200, d:pop("queue=orders&partition=p%201&batch=5",
                                 ADMIN).status)
        assert.refused_with("unauthorized",
                            d:push("orders", { "4" }, nil,
                                   { Authorization = "Bearer nope" }))
        assert.refused_with("forbidden", d:request("GET",
            "/api/v1/system/ephemeral", nil, OTHER))
        -- Not decided by the ladder: not a request line.
        d:request("GET", "/nowhere")
        d:request("GET", "/health")
        local log = d:await_log("route=system_status", 5)
        assert.falsy(log:find("secret-payload", 1, true))
        assert.falsy(log:find("admin-token", 1, true))
        assert.falsy(log:find("Bearer", 1, true))

        local r = requests(d)
        assert.equals(5, #r)
        assert.same({
            route = "push", method = "POST", path = "/api/v1/ephemeral/push",
            tenant = "00000000-0000-0000-0000-000000000001",
            identity = T1, access = "admin", queue = "orders",
            partition = "p 1", messages = 2, bytes = 17, code = "pass",
        }, r[1].fields)
        assert.equals("rate_limited", r[2].code)
        assert.equals(429, r[2].status)
        assert.equals("rate", r[2].fields.rung)
        assert.equals("Default", r[2].fields.partition)
        assert.equals(1, r[2].fields.messages)
        assert.same({ "pop", "orders", "p 1", "pass" },
                    { r[3].route, r[3].fields.queue, r[3].fields.partition,
                      r[3].code })
        -- Refused at the identity rung: the tenant read, nobody established.
        assert.equals("unauthorized", r[4].code)
        assert.equals("authenticate", r[4].fields.rung)
        assert.is_nil(r[4].fields.identity)
        assert.equals("forbidden", r[5].code)
        assert.equals("authenticate", r[5].fields.rung)
        assert.equals("22222222-2222-2222-2222-222222222222",
                      r[5].fields.identity)
        assert.is_number(r[1].at)
        assert.truthy(r[1].at <= r[5].at)
    end)

    it("leaves a shadow policy the live rung to compare with", function()
        local d = daemon.start({
            env = { QUEEN_EPHEMERAL_LOG_REQUESTS = "true",
                    QUEEN_EPHEMERAL_RATE = "1", QUEEN_EPHEMERAL_BURST = "1" } })
        finally(function() d:stop() end)
        -- plan-tiers puts the default tenant on pro: far more lenient.
        assert.equals(200, d:request("POST", "/api/v1/system/policy/shadow",
            '{"dir":"' .. helper.root .. '/examples/policies/plan-tiers"}',
            { ["Content-Type"] = "application/json" }).status)
        assert.equals(201, d:push("q", { "1" }).status)
        assert.refused_with("rate_limited", d:push("q", { "2" }))
        local shadow = d:request("GET", "/api/v1/system/policy/shadow")
                        .json.shadow
        assert.equals(1, shadow.disagreements)
        assert.same({ "rate_limited", "pass", "live:rate" },
                    { shadow.samples[1].live, shadow.samples[1].shadow,
                      shadow.samples[1].rung })
        assert.equals("rate", requests(d)[3].fields.rung)
    end)

    it("logs no queue name a push was refused for", function()
        local d = daemon.start({
            env = { QUEEN_EPHEMERAL_LOG_REQUESTS = "true" } })
        finally(function() d:stop() end)
        -- A name of any length up to the body's, or with a control
        -- character: refused at the shape rung, and not a name to log.
        local long = ("x"):rep(100000)
        assert.refused_with("ephemeral_bad_request", d:push(long, { "1" }))
        assert.refused_with("ephemeral_bad_request",
                            d:push("a\1b", { "1" }))
        assert.equals(201, d:push("fine", { "1" }).status)
        d:await_log("queue=fine", 5)
        local r = requests(d)
        assert.equals(3, #r)
        for i = 1, 2 do
            assert.same({ "ephemeral_bad_request", "shape" },
                        { r[i].code, r[i].fields.rung })
            -- Its length, not the name, when a failure prints it.
            assert.same({}, { q = r[i].fields.queue and #r[i].fields.queue,
                              p = r[i].fields.partition })
            assert.equals(1, r[i].fields.messages)
        end
        assert.falsy(d:read_log():find("xxxxxxxxxx", 1, true))
    end)

    it("is off by default", function()
        local d = daemon.start()
        finally(function() d:stop() end)
        assert.equals(201, d:push("q", { "1" }).status)
        assert.falsy(d:read_log():find("event=request", 1, true))
    end)
end)
