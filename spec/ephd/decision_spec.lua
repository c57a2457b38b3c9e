-- One decision core (ephd.rungs): a policy loaded as its own shadow
-- decides every request as the live ladder did, over mixed traffic that
-- meets every rung, and refuses with the live ladder's very words.
local cjson = require("cjson")
local ffi = require("ffi")
local helper = require("helper")
local testing = require("ephd.testing")

local DEFAULT = helper.root .. "/policies/default"
local POLICIES = {
    default = DEFAULT,
    ["plan-tiers"] = helper.root .. "/examples/policies/plan-tiers",
    ["bearer-tokens"] = helper.root .. "/examples/policies/bearer-tokens",
    ["every-rung"] = helper.root .. "/spec/e2e/policies/every-rung",
}

-- Tenants: granted a rate of 20, granted 300 bytes, turned off, and one
-- without a row (gated: grants are required).
local OK = "aaaaaaaa-0000-0000-0000-000000000001"
local SMALL = "aaaaaaaa-0000-0000-0000-000000000002"
local OFF = "aaaaaaaa-0000-0000-0000-000000000003"
local NONE = "aaaaaaaa-0000-0000-0000-000000000004"

-- bearer-tokens' tenants, and the tokens standing for OK and SMALL.
local BEARER = { [OK] = "22222222-2222-2222-2222-222222222222",
                 [SMALL] = "11111111-1111-1111-1111-111111111111" }
local BEARER_TOKEN = { [OK] = "other-tenant-token",
                       [SMALL] = "producer-token" }

-- A broker of doubles: the live policy in force, the engine's bytes per
-- tenant (what a push commits and what the shadow's footprint reads), the
-- clock.
local function broker(dir)
    local respond, answers = helper.responder()
    local held, clock = {}, { ms = 1000 }
    local C = helper.core_double({
        ephd_ffi_respond = respond,
        ephd_ffi_now_ms = function() return ffi.new("uint64_t", clock.ms) end,
        ephd_ffi_wall_time = function() return clock.ms / 1000 end,
        ephd_ffi_tenant_stats = function(tenant, len, stats)
            local b = held[ffi.string(tenant, len)]
            if not b then return -3 end
            stats.bytes = b
            return 0
        end,
    }, { tenancy_header = 1, require_grant = 1, rate = 50, burst = 50 })
    local policy = require("ephd.policy")
    local function load()
        return assert(policy.load(dir, testing.read(dir), DEFAULT,
                                  testing.read(DEFAULT), {}))
    end
    require("ephd.ladder").use(load())
    require("ephd.grants").replace({
        [OK] = { enabled = true, max_msgs_per_sec = 20 },
        [SMALL] = { enabled = true, max_bytes = 300 },
        [OFF] = { enabled = false },
        -- bearer-tokens' tenants
        ["11111111-1111-1111-1111-111111111111"] = { enabled = true,
                                                     max_bytes = 300 },
        ["22222222-2222-2222-2222-222222222222"] = {
            enabled = true, max_msgs_per_sec = 20 },
    })
    local b = {
        C = C, answers = answers, held = held, clock = clock,
        ladder = require("ephd.ladder"),
        shadow = require("ephd.shadow"),
        killswitch = require("ephd.killswitch"),
    }
    b.s = b.shadow.start(load(), dir)
    return b
end

-- One request through the live ladder, then judged by the shadow. t:
-- route, tenant (the header), auth, queue, messages, bytes, shape (a
-- shape refusal's words), full (the queue's bounds refuse).
local function run(b, t)
    local route = helper.route(t.route or "push")
    local req, anchor = helper.request({
        method = route.method, path = route.path, tenant = t.tenant,
        authorization = t.auth })
    local C = b.C
    local ctx = {
        req = req, anchor = anchor, route = route,
        family = route.class == "family", request = false, tenant = false,
        level = false, limits = false, taken = false, queue = false,
        partition = false, messages = false, bytes = false, forwarded = false,
        code = false, rung = false,
        handler = {
            parse = function(c)
                if route.name == "push" then
                    c.queue, c.partition = t.queue or "q", "Default"
                    c.messages, c.bytes = t.messages or 1, t.bytes or 10
                elseif route.name == "pop" then
                    c.queue, c.group = t.queue or "q", t.group or false
                end
                return t.shape
            end,
            commit = function(c)
                if t.full then return C.EPHD_REFUSE_QUEUE_FULL end
                if not c.bytes then return 0 end
                local held = b.held[c.tenant] or 0
                local max = c.limits and c.limits.max_bytes or 0
                if max > 0 and held + c.bytes > max then
                    return C.EPHD_REFUSE_TENANT_BYTES
                end
                b.held[c.tenant] = held + c.bytes
                return 0
            end,
        },
    }
    local before = #b.answers
    b.ladder.run(ctx)
    b.shadow.observe(ctx, b.s)
    local a = b.answers[#b.answers]
    if #b.answers == before then return "pass" end
    local body = cjson.decode(a.body)
    return body.code, body.error, a.headers
end

-- The traffic: each kind a request, some of them refused at a rung.
local KINDS = {
    { tenant = OK },
    { tenant = OK, messages = 7 },                 -- the rate, soon
    { tenant = OK, queue = "heavy-1" },            -- a cost of 10
    { tenant = OK, route = "pop" },
    { tenant = OK, route = "queues" },
    { tenant = SMALL, bytes = 60 },                -- its bytes, soon
    { tenant = OFF },                              -- the grant
    { tenant = NONE },                             -- no grant: gated
    { tenant = "not-a-uuid" },                     -- identity
    { tenant = OK, shape = "the body is not a push" },
    { tenant = OK, full = true },                  -- the queue's bounds
    { tenant = OK, auth = "Bearer reader" },       -- access (every-rung)
    { tenant = OK, auth = "Bearer refused" },      -- authenticate
    { tenant = OK, auth = "Bearer paused" },       -- paused
    { auth = "Bearer producer-token", bytes = 60 }, -- bearer-tokens
    { auth = "Bearer dashboard-token" },           -- read-only
    { auth = "Bearer other-tenant-token", messages = 5 },
    { auth = "Bearer nobody" },
    { route = "system_status", tenant = OK },       -- an admin route
}

-- And for every-rung, requests its admit refuses.
local ADMITTED = { { tenant = OK, queue = "tmp-1" },
                   { tenant = OK, queue = "slow-1" },
                   { tenant = OK, route = "pop", group = "closed" } }

describe("one decision core", function()
    for name, dir in pairs(POLICIES) do
        it(name .. " as its own shadow disagrees on nothing over mixed "
           .. "traffic", function()
            local b = broker(dir)
            local seen, family = {}, 0
            math.randomseed(23)
            for i = 1, 400 do
                -- Time moves in steps of 0 to 100 ms: buckets refill, a
                -- little.
                b.clock.ms = b.clock.ms + math.random(0, 100)
                if i == 200 then
                    b.killswitch.set(true, 30, "maintenance", 0)
                elseif i == 215 then
                    b.killswitch.set(false, nil, nil, 0)
                end
                if i == 300 or i == 320 then
                    -- A grants refresh turns OK (bearer-tokens' other
                    -- tenant) off for a while, and back on.
                    local g = require("ephd.grants")
                    local rows = g.all()
                    for _, t in ipairs({ OK, BEARER[OK] }) do
                        rows[t].enabled = i == 320
                    end
                    g.replace(rows)
                    require("ephd.limits").forget()
                    b.shadow.forget()
                end
                local kinds = KINDS
                if name == "every-rung" then
                    kinds = {}
                    for _, list in ipairs({ KINDS, ADMITTED }) do
                        for _, k in ipairs(list) do kinds[#kinds + 1] = k end
                    end
                end
                local t = kinds[math.random(#kinds)]
                if name == "bearer-tokens" and not t.auth then
                    -- Its identities are its tokens' alone.
                    local token = BEARER_TOKEN[t.tenant]
                    local copy = { auth = token and "Bearer " .. token }
                    for k, v in pairs(t) do copy[k] = copy[k] or v end
                    t = copy
                end
                local code, words = run(b, t)
                -- The shadow judges the family's routes alone.
                if not t.route or helper.route(t.route).class == "family" then
                    family = family + 1
                    seen[code] = (seen[code] or 0) + 1
                    if words and words:find("^admit:") then
                        seen.admit = (seen.admit or 0) + 1
                    end
                end
            end
            local r = b.shadow.report()
            assert.equals("running", r.state, cjson.encode(r.disabled))
            assert.equals(family, r.decisions)
            assert.equals(0, r.disagreements, cjson.encode(r.samples))
            -- Every rung answered, for every policy: the kill switch,
            -- identity, the grant, the shape, the rate, the queue's
            -- bounds, the tenant's bytes; access and the paused hook for
            -- the policies that decide them.
            local want = { "pass", "ephemeral_disabled", "unauthorized",
                           "feature_gated", "ephemeral_bad_request",
                           "rate_limited", "queue_full",
                           "ephemeral_quota_exceeded" }
            if name == "every-rung" or name == "bearer-tokens" then
                want[#want + 1] = "forbidden"
            end
            if name == "every-rung" then want[#want + 1] = "admit" end
            for _, code in ipairs(want) do
                assert.is_true((seen[code] or 0) > 0, code .. " never seen: "
                               .. cjson.encode(seen))
            end
        end)
    end

    it("refuses with the live ladder's words at every rung the shadow "
       .. "judges", function()
        local b = broker(POLICIES["every-rung"])
        -- What the shadow would answer, with its message: a verdict over
        -- the live broker's state, as ephd.shadow builds it, asked before
        -- the live ladder about the same requests.
        local judge = require("ephd.verdict").new(
            require("ephd.hooks").active, {
                grant = require("ephd.grants").get, require_grant = true,
                defaults = require("ephd.limits").defaults,
                tenancy_header = true, paused = b.killswitch.paused,
                counters = function(tenant)
                    return b.held[tenant] and { bytes = b.held[tenant] }
                end,
            })
        local function both(t)
            local route = helper.route(t.route or "push")
            local code, _, message = judge:decide({
                route = route.name, method = route.method, path = route.path,
                authorization = t.auth or "",
                tenant = t.tenant:find("^%x+%-") and t.tenant or nil,
                messages = t.messages or 1, bytes = t.bytes or 10,
                queue = t.queue or "q", partition = "Default",
            }, tonumber(b.C.ephd_ffi_now_ms()))
            local live, words = run(b, t)
            return { code or "pass", message }, { live, words }
        end
        local cases = {
            { tenant = "not-a-uuid" },
            { tenant = OFF },
            { tenant = NONE },
            { tenant = OK, auth = "Bearer reader" },
            { tenant = OK, auth = "Bearer refused" },
            { tenant = OK, auth = "Bearer paused" },
            { tenant = OK, queue = "tmp-1" }, -- admit's words
            { tenant = OK, queue = "slow-1" },
            { tenant = OK, messages = 25 },  -- over the burst: passes
            { tenant = OK },                 -- and leaves a debt
            { tenant = OK, messages = 25 },
        }
        local refused = 0
        for _, t in ipairs(cases) do
            local shadow, live = both(t)
            assert.same(live, shadow)
            if live[2] then refused = refused + 1 end
        end
        assert.equals(#cases - 1, refused)
        b.killswitch.set(true, 30, nil, 0)
        local shadow, live = both({ tenant = OK })
        assert.same(live, shadow)
        assert.equals("ephemeral_disabled", live[1])
        b.killswitch.set(false, nil, nil, 0)
        -- The tenant's bytes: the shadow's estimate says so, in the live
        -- refusal's words.
        both({ tenant = SMALL, bytes = 250 })
        shadow, live = both({ tenant = SMALL, bytes = 60 })
        assert.equals("ephemeral_quota_exceeded", live[1])
        assert.same({ live[1], live[2]:sub(1, -2) .. ", estimated)" }, shadow)
    end)
end)
