-- A policy loaded as its own shadow, through real HTTP: the live ladder
-- and the shadow run one set of rungs (ephd.rungs), so over a few hundred
-- mixed requests, refused at every rung, they disagree on nothing.
-- spec/ephd/decision_spec.lua drives the same with doubles, and compares
-- the refusals' words.
local cjson = require("cjson")
local daemon = require("e2e.daemon")
local helper = require("helper")

local SHADOW = "/api/v1/system/policy/shadow"
local SWITCH = "/api/v1/system/ephemeral"
local GRANTS = "/api/v1/system/grants"
local CONFIGURE = "/api/v1/ephemeral/configure"
local DEFAULT_TENANT = "00000000-0000-0000-0000-000000000001"
local OK = "aaaaaaaa-0000-0000-0000-000000000001"
local SMALL = "aaaaaaaa-0000-0000-0000-000000000002"
local NONE = "aaaaaaaa-0000-0000-0000-000000000004"

local BIG = cjson.encode(("x"):rep(200))

-- Runs n mixed requests against d, whose live policy is its shadow too.
-- who: the headers of a tenant granted a rate (ok, its tenant ok_tenant),
-- of one granted few bytes (small), and where the policy has them, of a
-- tenant with no grant (none), of no identity (bad), of a read-only
-- credential (reader), of one its paused hook pauses (paused); admin's
-- for the switch, the grants and the report; admits: the policy's admit
-- refuses tmp-*, slow-* and the group closed (every-rung). Returns the report and the
-- live codes seen on the family's routes.
local function traffic(d, who, n)
    local seen = {}
    local function saw(res)
        local code = res.json and res.json.code or "pass"
        seen[code] = (seen[code] or 0) + 1
        -- every-rung's admit says so in its words.
        if res.json and res.json.error and res.json.error:find("^admit:") then
            seen.admit = (seen.admit or 0) + 1
        end
    end
    local function grant(row)
        assert.equals(200, d:request("POST", GRANTS, cjson.encode(row),
                                     who.admin).status)
    end
    -- The grants, one row a tenant (ok and small may be one).
    local rows = {}
    local function row(tenant)
        rows[tenant] = rows[tenant] or { tenant = tenant }
        return rows[tenant]
    end
    row(who.ok_tenant).maxMsgsPerSec = 50
    row(who.small_tenant)
    for _, r in pairs(rows) do grant(r) end
    assert.equals(201, d:request("POST", CONFIGURE,
        '{"queue":"tiny","options":{"maxLength":2}}', who.ok).status)
    local kinds = {
        function() return d:push("q", { "1" }, nil, who.ok) end,
        function() return d:push("q", { "1", "2", "3", "4", "5", "6" }, nil,
                                 who.ok) end,
        function() return d:push("tiny", { "1" }, nil, who.ok) end,
        function() return d:pop("queue=q&batch=3", who.ok) end,
        function() return d:request("GET", "/api/v1/ephemeral/queues", nil,
                                    who.ok) end,
        function() return d:request("POST", "/api/v1/ephemeral/push",
                                    '{"queue":"q","messages":[', who.ok) end,
        function() return d:push("b", { BIG }, nil, who.small) end,
    }
    if who.admits then
        kinds[#kinds + 1] = function()
            return d:push("tmp-1", { "1" }, nil, who.ok)
        end
        kinds[#kinds + 1] = function()
            return d:push("slow-1", { "1" }, nil, who.ok)
        end
        kinds[#kinds + 1] = function()
            return d:pop("queue=q&group=closed", who.ok)
        end
    end
    for _, k in ipairs({ "none", "bad", "reader", "paused" }) do
        if who[k] then
            kinds[#kinds + 1] = function()
                return d:push("q", { "1" }, nil, who[k])
            end
        end
    end
    math.randomseed(23)
    local third = math.floor(n / 3)
    for i = 1, n do
        if i == third then
            assert.equals(200, d:request("POST", SWITCH,
                '{"enabled":false,"retryAfter":5}', who.admin).status)
        elseif i == third + 10 then
            assert.equals(200, d:request("POST", SWITCH, '{"enabled":true}',
                                         who.admin).status)
        elseif i == 2 * third or i == 2 * third + 10 then
            -- The granted tenant turned off for a while, and on again.
            local r = row(who.ok_tenant)
            r.enabled = i ~= 2 * third
            grant(r)
        elseif i == 2 * third + 20 then
            -- From here on small has an allowance of bytes (where it is
            -- ok's tenant too, it holds more already, and its rate is
            -- lifted, so its pushes reach the engine).
            local r = row(who.small_tenant)
            r.maxBytes, r.maxMsgsPerSec = 3000, nil
            grant(r)
        end
        -- The first three fill tiny and pass it (its bucket still full),
        -- so queue_full is answered however fast the rest refill it.
        saw((i <= 3 and kinds[3] or kinds[math.random(#kinds)])())
    end
    local res = d:request("GET", SHADOW, nil, who.admin)
    assert.equals(200, res.status, res.body)
    return res.json.shadow, seen
end

local function check(s, seen, n, want)
    assert.equals("running", s.state, cjson.encode(s.disabled))
    assert.equals(n, s.decisions)
    assert.equals(0, s.disagreements, cjson.encode(s.samples))
    for _, code in ipairs(want) do
        assert.is_true((seen[code] or 0) > 0,
                       code .. " never answered: " .. cjson.encode(seen))
    end
end

local WANT = { "pass", "ephemeral_disabled", "feature_gated",
               "ephemeral_bad_request", "rate_limited", "queue_full",
               "ephemeral_quota_exceeded" }

local function with(list, ...)
    local out = { ... }
    for _, v in ipairs(list) do out[#out + 1] = v end
    return out
end

describe("a policy as its own shadow", function()
    after_each(function()
        daemon.sql("TRUNCATE queen.ephemeral_quota")
        daemon.forget_declarations()
    end)

    local function start(dir, tenancy)
        return daemon.start({
            db = true,
            args = { "--policy-dir " .. dir, "--shadow-policy " .. dir },
            env = { QUEEN_TENANCY_HEADER = tenancy and "true" or "false",
                    QUEEN_EPHEMERAL_REQUIRE_GRANT = "true",
                    QUEEN_EPHEMERAL_REFRESH_S = "3600" } })
    end

    -- Without tenancy headers the one tenant is its operator: the kill
    -- switch, the grant, the shape, the rate, the queue's bounds and the
    -- tenant's bytes, for the two policies with no identities of their
    -- own. Small is the same tenant, with a byte allowance.
    for _, p in ipairs({ { "default", helper.root .. "/policies/default" },
                         { "plan-tiers", helper.root
                                         .. "/examples/policies/plan-tiers" } }) do
        it(p[1] .. " disagrees on nothing", function()
            local d = start(p[2], false)
            finally(function() d:stop() end)
            local s, seen = traffic(d, {
                ok_tenant = DEFAULT_TENANT, small_tenant = DEFAULT_TENANT,
                admin = {},
            }, 300)
            check(s, seen, 300 + 1, WANT) -- and the configure
        end)
    end

    it("bearer-tokens disagrees on nothing, identities and levels refused "
       .. "too", function()
        local d = start(helper.root .. "/examples/policies/bearer-tokens",
                        true)
        finally(function() d:stop() end)
        local function as(token) return { Authorization = "Bearer " .. token } end
        local s, seen = traffic(d, {
            ok = as("other-tenant-token"),
            ok_tenant = "22222222-2222-2222-2222-222222222222",
            small = as("producer-token"),
            small_tenant = "11111111-1111-1111-1111-111111111111",
            bad = as("nobody"), reader = as("dashboard-token"),
            admin = as("admin-token"),
        }, 300)
        check(s, seen, 300 + 1, with(WANT, "unauthorized", "forbidden"))
    end)

    it("a policy with a say at every rung disagrees on nothing", function()
        local d = start(helper.root .. "/spec/e2e/policies/every-rung", true)
        finally(function() d:stop() end)
        local function as(tenant, token)
            return { ["x-queen-tenant"] = tenant,
                     Authorization = token and "Bearer " .. token }
        end
        local s, seen = traffic(d, {
            ok = as(OK), ok_tenant = OK, small = as(SMALL),
            small_tenant = SMALL, none = as(NONE),
            bad = as("not-a-uuid"), reader = as(OK, "reader"),
            paused = as(OK, "paused"), admin = as(OK, "operator"),
            admits = true,
        }, 300)
        check(s, seen, 300 + 1, with(WANT, "unauthorized", "forbidden",
                                     "admit"))
    end)
end)
