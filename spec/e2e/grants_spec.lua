-- Grants through the admin routes (/api/v1/system/grants) and `ephd
-- grant`: written to queen.ephemeral_quota and in force from the answer
-- on, not from the next refresh; the count logged at each load, at debug
-- when it did not change.
local cjson = require("cjson")
local daemon = require("e2e.daemon")
local helper = require("helper")

local EPHD = helper.build .. "/ephd"
-- With tenancy headers on, admin is a credential the policy vouches for:
-- the bearer-tokens example's, whose other-tenant-token is T's.
local T = "22222222-2222-2222-2222-222222222222"
local TH = { Authorization = "Bearer other-tenant-token" }
local ADMIN = { Authorization = "Bearer admin-token" }
local GRANTS = "/api/v1/system/grants"

local function set(d, grant)
    return d:request("POST", GRANTS, cjson.encode(grant), ADMIN)
end

describe("grants", function()
    local d
    before_each(function()
        daemon.sql("TRUNCATE queen.ephemeral_quota")
        -- A refresh an hour away: whatever applies, the write applied.
        d = daemon.start({ db = true, args = { "--policy-dir " .. helper.root
                                                .. "/examples/policies/bearer-tokens" },
                           env = { QUEEN_TENANCY_HEADER = "true",
                                   QUEEN_EPHEMERAL_REFRESH_S = "3600" } })
    end)
    after_each(function()
        d:stop()
        daemon.sql("TRUNCATE queen.ephemeral_quota")
    end)

    it("applies a grant at its answer, and its removal at its answer",
       function()
        assert.refused_with("feature_gated", d:push("g", { "1" }, nil, TH))
        local res = set(d, { tenant = T })
        assert.equals(200, res.status)
        assert.equals(T, res.json.grant.tenant)
        assert.is_true(res.json.grant.enabled)
        assert.equals(cjson.null, res.json.grant.maxBytes)
        assert.equals(1, res.json.grants)
        assert.equals(201, d:push("g", { "1" }, nil, TH).status)
        assert.equals("t", daemon.sql("SELECT enabled FROM "
                                      .. "queen.ephemeral_quota"))

        res = d:request("DELETE", GRANTS .. "/" .. T, nil, ADMIN)
        assert.same({ tenant = T, deleted = true, grants = 0 }, res.json)
        assert.refused_with("feature_gated", d:push("g", { "1" }, nil, TH))
        res = d:request("DELETE", GRANTS .. "/" .. T, nil, ADMIN)
        assert.same({ tenant = T, deleted = false, grants = 0 }, res.json)
    end)

    it("sets the whole row: limits in force at once, then defaults again",
       function()
        assert.equals(200, set(d, { tenant = T, maxMsgsPerSec = 3 }).status)
        assert.equals(201, d:push("g", { "1", "2", "3" }, nil, TH).status)
        assert.refused_with("rate_limited", d:push("g", { "4" }, nil, TH))
        -- The limits the old grant decided are forgotten with it: the
        -- bucket keeps its tokens and refills at the default rate, 5000/s
        -- (at 3/s, 10 ms would not give one back).
        assert.equals(200, set(d, { tenant = T }).status)
        -- A refill needs a millisecond of the broker's clock (a push in the
        -- same one finds none): within 0.3 s, where 3/s could not give
        -- three. A refused push takes nothing.
        daemon.wait_until("three tokens at the default rate", function()
            return d:push("g", { "1", "2", "3" }, nil, TH).status == 201
        end, 0.3, 0.005)
        daemon.sleep(0.01) -- elapsed time: the refill at 5000/s
        assert.equals(201, d:push("g", { "1", "2", "3", "4" }, nil, TH).status)
        assert.equals(200, set(d, { tenant = T, enabled = false }).status)
        assert.refused_with("feature_gated", d:push("g", { "1" }, nil, TH))
    end)

    it("lists the grants in force, and whether a tenant needs one",
       function()
        set(d, { tenant = T, maxBytes = 1048576, maxQueues = 10 })
        set(d, { tenant = "EEEEEEEE-eeee-eeee-eeee-eeeeeeeeeeee",
                 enabled = false })
        local list = d:request("GET", GRANTS, nil, ADMIN).json
        assert.equals(2, list.count)
        assert.is_true(list.requireGrant)
        assert.same({ tenant = T, enabled = true, maxBytes = 1048576,
                      maxQueues = 10, maxMsgsPerSec = cjson.null },
                    list.grants[1])
        -- Tenants are kept in lower case, as the tenancy header is read.
        assert.equals("eeeeeeee-eeee-eeee-eeee-eeeeeeeeeeee",
                      list.grants[2].tenant)
    end)

    it("refuses a malformed grant, and answers while the surface is paused",
       function()
        for _, body in ipairs({ '{"tenant":"acme"}', '{}',
                                '{"tenant":"' .. T .. '","maxBytes":-1}',
                                '{"tenant":"' .. T .. '","maxQueues":1.5}',
                                '{"tenant":"' .. T .. '","rate":5}' }) do
            assert.refused_with("ephemeral_bad_request",
                                d:request("POST", GRANTS, body, ADMIN))
        end
        assert.refused_with("ephemeral_bad_request",
                            d:request("DELETE", GRANTS .. "/acme", nil, ADMIN))
        assert.refused_with("forbidden", d:request("POST", GRANTS,
            cjson.encode({ tenant = T }), TH))
        d:request("POST", "/api/v1/system/ephemeral", '{"enabled":false}',
                  ADMIN)
        assert.equals(200, set(d, { tenant = T }).status)
        assert.equals(1, d:request("GET", GRANTS, nil, ADMIN).json.count)
    end)

    it("logs the grant count at each load, at debug when it is the same",
       function()
        local log = d:await_log("grants_loaded", 5)
        assert.matches("level=info event=grants_loaded count=0", log)
        set(d, { tenant = T })
        assert.matches("level=info event=grants_loaded count=1",
                       d:await_log("grants_loaded count=1", 5))
        set(d, { tenant = T, maxQueues = 5 })
        -- The same count again: a debug line, off by default.
        d:request("GET", GRANTS, nil, ADMIN)
        local _, n = d:read_log():gsub("event=grants_loaded", "")
        assert.equals(2, n)
    end)

    it("is ephd grant set, list and rm from a shell", function()
        local url = " --token admin-token --url http://127.0.0.1:" .. d.port
        local out, code = helper.run(EPHD .. " grant set " .. T
                                     .. " --rate 100 --max-queues 7" .. url)
        assert.equals(0, code)
        assert.equals("granted " .. T .. ": enabled, max bytes default, "
                      .. "max queues 7, rate 100/s\n", out)
        assert.equals(201, d:push("g", { "1" }, nil, TH).status)
        out, code = helper.run(EPHD .. " grant list" .. url)
        assert.equals(0, code)
        assert.matches("TENANT%s+ENABLED%s+MAX BYTES%s+MAX QUEUES%s+RATE/S\n"
                       .. T:gsub("%-", "%%-") .. "%s+yes%s+default%s+7%s+100\n",
                       out)
        assert.matches("1 grant; a tenant without one is refused", out)
        out = helper.run(EPHD .. " grant list --json" .. url)
        assert.equals(1, cjson.decode(out).count)
        out, code = helper.run(EPHD .. " grant rm " .. T .. url)
        assert.equals(0, code)
        assert.equals("removed " .. T .. "\n", out)
        out = helper.run(EPHD .. " grant rm " .. T .. url)
        assert.equals("no grant for " .. T .. "\n", out)
        out, code = helper.run(EPHD .. " grant set" .. url)
        assert.equals(2, code)
        assert.matches("usage: ephd grant", out)
    end)
end)

describe("grants without a database", function()
    it("refuses a write with 503 and lists none", function()
        local d = daemon.start()
        finally(function() d:stop() end)
        assert.refused_with("ephemeral_unavailable", d:request("POST", GRANTS,
            cjson.encode({ tenant = T })))
        assert.refused_with("ephemeral_unavailable",
                            d:request("DELETE", GRANTS .. "/" .. T))
        assert.equals(0, d:request("GET", GRANTS).json.count)
    end)
end)

describe("the periodic load", function()
    it("logs declarations_loaded at debug once nothing changed", function()
        local d = daemon.start({ db = true, env = {
            QUEEN_EPHEMERAL_REFRESH_S = "1", QUEEN_EPHEMERAL_LOG_DEBUG = "1" } })
        finally(function() d:stop() end)
        -- Once a periodic load has run, the first load is still the only
        -- one logged at info.
        local log = d:await_log("level=debug event=declarations_loaded", 5)
        assert.matches("level=debug event=declarations_loaded count=0", log)
        local _, n = log:gsub("level=info event=declarations_loaded", "")
        assert.equals(1, n)
    end)
end)
