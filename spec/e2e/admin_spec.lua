-- Who holds admin. A tenancy header is a claim anyone can make, so with
-- QUEEN_TENANCY_HEADER on the default policy gives header identities
-- read-write and never admin: the kill switch, a policy reload and every
-- tenant's metering need an identity the policy's authenticate hook
-- vouches for (examples/policies/bearer-tokens).
local daemon = require("e2e.daemon")
local helper = require("helper")

local SWITCH = "/api/v1/system/ephemeral"
local ADMIN_ROUTES = {
    { "POST", SWITCH, '{"enabled":false}' },
    { "GET", SWITCH },
    { "POST", "/api/v1/system/policy/reload" },
    { "GET", "/api/v1/system/metering" },
    { "GET", "/api/v1/system/queues" },
    { "GET", "/api/v1/system/grants" },
    { "POST", "/api/v1/system/grants",
      '{"tenant":"aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"}' },
    { "DELETE", "/api/v1/system/grants/aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa" },
    { "GET", "/api/v1/system/policy/shadow" },
    { "POST", "/api/v1/system/policy/shadow", '{"dir":"/nonexistent"}' },
    { "DELETE", "/api/v1/system/policy/shadow" },
    { "POST", "/api/v1/system/policy/promote" },
}

local IDENTITIES = {
    ["no header"] = {},
    ["a header tenant"] = {
        ["x-queen-tenant"] = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa" },
    ["an ungranted tenant"] = {
        ["x-queen-tenant"] = "dddddddd-dddd-dddd-dddd-dddddddddddd" },
}

describe("admin with tenancy headers on", function()
    local d
    lazy_setup(function()
        d = daemon.start({ env = { QUEEN_TENANCY_HEADER = "true",
                                   QUEEN_EPHEMERAL_REQUIRE_GRANT = "false" } })
    end)
    lazy_teardown(function() d:stop() end)

    for what, headers in pairs(IDENTITIES) do
        it("refuses every system route to " .. what, function()
            for _, r in ipairs(ADMIN_ROUTES) do
                local res = d:request(r[1], r[2], r[3], headers)
                assert.refused_with("forbidden", res)
                assert.truthy(res.json.error:find("read-write", 1, true),
                              res.body)
            end
            -- Nothing was switched: the family still answers.
            assert.equals(201, d:push("q", { "1" }, nil, headers).status)
        end)
    end

    it("still serves a header tenant its own queues", function()
        local h = IDENTITIES["a header tenant"]
        assert.equals(201, d:push("mine", { "1" }, nil, h).status)
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues", nil,
                                     h).status)
        assert.equals(1, #d:pop("queue=mine&autoAck=true", h).json.messages)
    end)
end)

describe("admin with tenancy headers off", function()
    it("is the single tenant's, with no credentials (ephd status)",
       function()
        local d = daemon.start()
        finally(function() d:stop() end)
        assert.equals(200, d:request("GET", SWITCH).status)
        assert.equals(200, d:request("GET", "/api/v1/system/metering").status)
    end)
end)

describe("admin from the bearer-tokens example", function()
    local d
    lazy_setup(function()
        d = daemon.start({
            args = { "--policy-dir " .. helper.root
                     .. "/examples/policies/bearer-tokens" },
            env = { QUEEN_TENANCY_HEADER = "true",
                    QUEEN_EPHEMERAL_REQUIRE_GRANT = "false" } })
    end)
    lazy_teardown(function() d:stop() end)

    local ADMIN = { Authorization = "Bearer admin-token" }

    it("lets the admin token flip the switch, reload and meter", function()
        local res = d:request("POST", SWITCH, '{"enabled":false}', ADMIN)
        assert.equals(200, res.status)
        assert.is_false(res.json.enabled)
        assert.equals(200, d:request("POST", SWITCH, '{"enabled":true}',
                                     ADMIN).status)
        res = d:request("POST", "/api/v1/system/policy/reload", nil, ADMIN)
        assert.equals(200, res.status)
        assert.equals("bearer-tokens", res.json.policy.name)
        assert.equals(200, d:request("GET", "/api/v1/system/metering", nil,
                                     ADMIN).status)
    end)

    it("refuses the other tokens with 403, no token with 401", function()
        for _, token in ipairs({ "producer-token", "dashboard-token",
                                 "other-tenant-token" }) do
            assert.refused_with("forbidden", d:request("POST", SWITCH,
                '{"enabled":false}', { Authorization = "Bearer " .. token }))
        end
        assert.refused_with("unauthorized", d:request("POST", SWITCH,
            '{"enabled":false}', { ["x-queen-tenant"] =
                "11111111-1111-1111-1111-111111111111" }))
    end)
end)
