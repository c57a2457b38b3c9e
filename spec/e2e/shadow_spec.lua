-- The shadow policy: a candidate judged beside the live one on real
-- traffic, never changing an answer; what it would have refused counted
-- and sampled; promoted in one step; disabled, never the live path, when
-- it fails (docs/policy.md, "Changing policy safely").
local cjson = require("cjson")
local daemon = require("e2e.daemon")
local helper = require("helper")

local SHADOW = "/api/v1/system/policy/shadow"
local PROMOTE = "/api/v1/system/policy/promote"
local POLICIES = helper.root .. "/spec/e2e/policies/"
local PLAN_TIERS = helper.root .. "/examples/policies/plan-tiers"
local STRICT = POLICIES .. "plan-tiers-strict"
local DEFAULT_TENANT = "00000000-0000-0000-0000-000000000001"

local function load_shadow(d, dir, headers)
    return d:request("POST", SHADOW, cjson.encode({ dir = dir }), headers)
end

local function shadow_of(d, headers)
    local res = d:request("GET", SHADOW, nil, headers)
    assert.equals(200, res.status, res.body)
    return res.json.shadow
end

local function pair(s, live, shadow)
    for _, p in ipairs(s.pairs) do
        if p.live == live and p.shadow == shadow then return p.count end
    end
    return 0
end

local function plan_tiers(opts)
    opts = opts or {}
    opts.args = opts.args or {}
    table.insert(opts.args, 1, "--policy-dir " .. PLAN_TIERS)
    return daemon.start(opts)
end

describe("a shadow policy", function()
    it("is refused at load with its error, and none is shadowing",
       function()
        local d = plan_tiers()
        finally(function() d:stop() end)
        assert.same({ shadow = cjson.null }, d:request("GET", SHADOW).json)
        local dir = os.tmpname()
        os.remove(dir)
        assert(os.execute("mkdir -p " .. dir) == 0)
        local f = assert(io.open(dir .. "/init.lua", "w"))
        f:write("return { name = 'broken', version = 1, hooks = { "
                .. "limits = function( }")
        f:close()
        local res = load_shadow(d, dir)
        assert.refused_with("ephemeral_bad_request", res)
        assert.truthy(res.json.error:find("did not load", 1, true), res.body)
        assert.truthy(res.json.error:find(dir .. "/init.lua", 1, true),
                      res.body)
        assert.truthy(d:read_log():find("event=policy_shadow_refused", 1,
                                        true))
        for _, bad in ipairs({ "relative/dir", "", 7 }) do
            assert.refused_with("ephemeral_bad_request",
                                load_shadow(d, bad))
        end
        assert.refused_with("ephemeral_bad_request",
                            load_shadow(d, "/nonexistent/policy"))
        assert.same({ shadow = cjson.null }, d:request("GET", SHADOW).json)
        -- Nothing to promote.
        assert.refused_with("ephemeral_bad_request",
                            d:request("POST", PROMOTE))
        assert.equals(201, d:push("q", { "1" }).status)
    end)

    it("judges the family's routes, the system routes only when asked",
       function()
        local d = plan_tiers()
        finally(function() d:stop() end)
        assert.equals(200, load_shadow(d, STRICT).status)
        -- A dashboard's polling is not what a candidate changes for
        -- tenants: not counted.
        for _ = 1, 3 do
            assert.equals(200, d:request("GET",
                                         "/api/v1/system/ephemeral").status)
        end
        assert.equals(201, d:push("q", { "1" }).status)
        local s = shadow_of(d)
        assert.equals("family", s.routes)
        assert.equals(1, s.decisions)
        assert.equals(1, pair(s, "pass", "pass"))
        -- Opted in, they are.
        assert.equals(200, d:request("POST", SHADOW, cjson.encode({
            dir = STRICT, routes = "all" })).status)
        assert.equals(200, d:request("GET", "/api/v1/system/ephemeral").status)
        s = shadow_of(d)
        assert.equals("all", s.routes)
        -- The GET above (a report's own GET is judged once it is
        -- answered, after its counts were written).
        assert.equals(1, s.decisions)
        assert.equals(2, shadow_of(d).decisions)
        assert.refused_with("ephemeral_bad_request", d:request("POST", SHADOW,
            cjson.encode({ dir = STRICT, routes = "system" })))
    end)

    it("records a system route's refusal at its commit as the live answer, "
       .. "not as a pass", function()
        local d = plan_tiers()
        finally(function() d:stop() end)
        assert.equals(200, d:request("POST", SHADOW, cjson.encode({
            dir = STRICT, routes = "all" })).status)
        -- No database: the grant write is refused at its commit.
        local res = d:request("POST", "/api/v1/system/grants", cjson.encode({
            tenant = DEFAULT_TENANT, enabled = true }))
        assert.refused_with("ephemeral_unavailable", res)
        local s = shadow_of(d)
        assert.equals(1, pair(s, "ephemeral_unavailable",
                              "ephemeral_unavailable"), cjson.encode(s.pairs))
        assert.equals(0, pair(s, "pass", "pass"))
    end)

    it("serves what the candidate would refuse, and names exactly those "
       .. "requests; promote makes the refusals real", function()
        local d = plan_tiers()
        finally(function() d:stop() end)
        local res = load_shadow(d, STRICT)
        assert.equals(200, res.status, res.body)
        assert.same({ shadowed = true,
                      policy = { name = "plan-tiers-strict", version = 2 } },
                    res.json)
        -- Live: pro, a million a second. Candidate: free, 5 a second with
        -- a burst of 5. One push of 5 takes the candidate's whole burst;
        -- the three after it (within a second) it would refuse, and all
        -- four are served.
        assert.equals(201, d:push("q", { "1", "2", "3", "4", "5" }).status)
        for i = 1, 3 do
            assert.equals(201, d:push("q" .. i, { "1" }).status)
        end
        assert.equals(200, d:pop("queue=q&batch=1").status)
        local s = shadow_of(d)
        assert.equals("plan-tiers-strict", s.name)
        assert.equals(2, s.version)
        assert.equals(STRICT, s.dir)
        assert.equals("running", s.state)
        assert.equals(cjson.null, s.disabled)
        assert.is_true(s.since > 1.7e12 and s.since < 4e12, s.since)
        assert.equals(3, s.disagreements)
        assert.equals(3, pair(s, "pass", "rate_limited"))
        assert.equals("pass", s.pairs[1].live)
        assert.equals("rate_limited", s.pairs[1].shadow)
        -- Agreements are counted too: the first push and the pop.
        assert.is_true(pair(s, "pass", "pass") >= 2)
        assert.equals(s.decisions, s.disagreements + pair(s, "pass", "pass"))
        assert.same({ { tenant = DEFAULT_TENANT, disagreements = 3 } },
                    s.tenants)
        assert.equals(3, #s.samples)
        for i, sample in ipairs(s.samples) do
            assert.same({ route = "push", tenant = DEFAULT_TENANT,
                          live = "pass", shadow = "rate_limited",
                          rung = "rate", at = sample.at }, sample)
            if i > 1 then assert.is_true(sample.at <= s.samples[i - 1].at) end
        end
        assert.equals(3, d:metric('queen_ephemeral_shadow_decisions_total'
                                  .. '{live="pass",shadow="rate_limited"} (%d+)'))
        assert.is_true(d:metric('queen_ephemeral_shadow_decisions_total'
                                .. '{live="pass",shadow="pass"} (%d+)') >= 2)
        -- The live buckets were never the candidate's: pro still pushes.
        assert.equals(201, d:push("q", { "1", "2", "3", "4", "5", "6" }).status)

        res = d:request("POST", PROMOTE)
        assert.equals(200, res.status, res.body)
        assert.same({ promoted = true, policy = {
            name = "plan-tiers-strict", version = 2, dir = STRICT } },
            res.json)
        assert.same({ shadow = cjson.null }, d:request("GET", SHADOW).json)
        local st = d:request("GET", "/api/v1/system/ephemeral").json
        assert.equals("plan-tiers-strict", st.policy.name)
        -- The refusals are real now (the limits the old policy decided
        -- were forgotten, and the new bucket starts full).
        assert.equals(201, d:push("q", { "1", "2", "3", "4", "5" }).status)
        assert.refused_with("rate_limited", d:push("q", { "6" }))
        -- A reload reads the promoted directory: SIGHUP does not revert.
        res = d:request("POST", "/api/v1/system/policy/reload")
        assert.same({ reloaded = true, policy = {
            name = "plan-tiers-strict", version = 2 } }, res.json)
        assert.truthy(d:read_log():find("event=policy_promoted", 1, true))
    end)

    it("is removed by DELETE, its counts with it", function()
        local d = plan_tiers({ args = { "--shadow-policy " .. STRICT } })
        finally(function() d:stop() end)
        assert.equals("plan-tiers-strict", shadow_of(d).name)
        assert.equals(201, d:push("q", { "1" }).status)
        local res = d:request("DELETE", SHADOW)
        assert.equals(200, res.status)
        assert.same({ shadow = cjson.null }, res.json)
        assert.same({ shadow = cjson.null }, d:request("GET", SHADOW).json)
        assert.falsy(d:request("GET", "/metrics").body
                     :find("queen_ephemeral_shadow_decisions_total{", 1, true))
        assert.equals(200, d:request("DELETE", SHADOW).status)
    end)

    it("hands its cost hook the push's queue and partition when the live "
       .. "policy has no cost hook", function()
        -- The default policy's cost is the message count, so the push's
        -- names were not read for the live ladder; the candidate's hook
        -- indexed a nil queue and the shadow disabled itself.
        local d = daemon.start({ args = { "--shadow-policy " .. POLICIES
                                          .. "cost-by-queue" } })
        finally(function() d:stop() end)
        local hundred = {}
        for i = 1, 101 do hundred[i] = tostring(i) end
        assert.equals(201, d:push("bulk-orders", hundred).status)
        assert.equals(201, d:push("orders", hundred).status)
        local s = shadow_of(d)
        assert.equals("running", s.state, cjson.encode(s.disabled))
        assert.equals(1, pair(s, "pass", "rate_limited"))
        assert.equals(1, pair(s, "pass", "pass"))
    end)

    it("compares with a handler's own refusal, not with a pass",
       function()
        -- A depth of no queue is the handler's 404, after every rung: the
        -- candidate refusing it earlier disagrees with the 404.
        local d = daemon.start({ args = { "--shadow-policy " .. POLICIES
                                          .. "lockdown" } })
        finally(function() d:stop() end)
        assert.refused_with("ephemeral_queue_not_found",
            d:request("GET", "/api/v1/ephemeral/queues/none/depth"))
        local s = shadow_of(d)
        assert.equals(1, pair(s, "ephemeral_queue_not_found", "unauthorized"))
        assert.equals(0, pair(s, "pass", "unauthorized"))
    end)

    it("refuses to boot with a --shadow-policy that does not load",
       function()
        local out, rc = helper.run(("timeout 20 %s/ephd --listen 127.0.0.1:%d "
            .. "--policy-dir %s --shadow-policy %s")
            :format(helper.build, daemon.free_port(), PLAN_TIERS,
                    POLICIES .. "top-level-loop"))
        assert.equals(2, rc, out)
        assert.truthy(out:find("event=boot_failed", 1, true), out)
        assert.truthy(out:find("shadow policy " .. POLICIES
                               .. "top-level-loop", 1, true), out)
        assert.truthy(out:find("time budget", 1, true), out)
    end)

    describe("that fails mid-traffic", function()
        local function disables(dir, why)
            local d = plan_tiers({ args = { "--shadow-policy " .. dir } })
            finally(function() d:stop() end)
            for i = 1, 6 do
                assert.equals(201, d:push("q", { tostring(i) }).status)
            end
            local s = shadow_of(d)
            assert.equals("disabled", s.state)
            assert.equals("cost", s.disabled.hook)
            assert.truthy(s.disabled.error:find(why, 1, true),
                          s.disabled.error)
            assert.is_number(s.disabled.at)
            local log = d:read_log()
            local _, lines = log:gsub("event=policy_shadow_disabled", "")
            assert.equals(1, lines, log)
            assert.truthy(log:find("event=policy_shadow_disabled[^\n]* "
                                   .. "hook=cost"), log)
            assert.equals(1, d:metric(
                "queen_ephemeral_shadow_disabled_total (%d+)"))
            -- Nothing further is judged, and a disabled shadow is not
            -- promoted.
            local decisions = s.decisions
            assert.equals(201, d:push("q", { "7" }).status)
            assert.equals(decisions, shadow_of(d).decisions)
            local res = d:request("POST", PROMOTE)
            assert.refused_with("ephemeral_bad_request", res)
            assert.truthy(res.json.error:find("disabled", 1, true))
            assert.equals("plan-tiers",
                d:request("GET", "/api/v1/system/ephemeral").json.policy.name)
            -- The live policy never counted a failure.
            assert.equals(0, d:metric('queen_ephemeral_policy_hook_failures'
                                      .. '_total{hook="cost"} (%d+)'))
        end

        it("disables itself when a hook raises, the live path answering "
           .. "every request", function()
            disables(POLICIES .. "breaks-mid-traffic", "the candidate broke")
        end)

        it("disables itself when a hook runs past the budget", function()
            disables(POLICIES .. "loops-mid-traffic", "time budget")
        end)

        it("leaves the live policy its share of the memory cap when it "
           .. "fills its own", function()
            -- plan-tiers decides each new tenant's limits in policy code;
            -- the candidate keeps all it can allocate on its first call.
            local d = plan_tiers({ env = {
                QUEEN_TENANCY_HEADER = "true",
                QUEEN_EPHEMERAL_REQUIRE_GRANT = "false",
                QUEEN_EPHEMERAL_POLICY_MAX_BYTES = tostring(32 * 1048576),
            }, args = { "--shadow-policy " .. POLICIES .. "hoards-memory" } })
            finally(function() d:stop() end)
            for i = 1, 30 do
                local tenant = ("00000000-0000-0000-0000-%012d"):format(100 + i)
                local res = d:push("q", { "1" }, nil,
                                   { ["x-queen-tenant"] = tenant })
                assert.equals(201, res.status, i .. ": " .. res.body)
            end
            -- (The shadow's read and /metrics are the admin's: the log says.)
            local log = d:read_log()
            assert.truthy(log:find('event=policy_shadow_disabled[^\n]* '
                                   .. 'error="not enough memory"[^\n]* '
                                   .. 'hook=limits'), log)
        end)
    end)

    describe("ephd policy shadow", function()
        local EPHD = helper.build .. "/ephd"

        it("prints the report as tables a person reads", function()
            local d = plan_tiers({ args = { "--shadow-policy " .. STRICT } })
            finally(function() d:stop() end)
            local url = " --url http://127.0.0.1:" .. d.port
            assert.equals(201, d:push("q", { "1", "2", "3", "4", "5", "6" })
                .status)
            assert.equals(201, d:push("q", { "1" }).status)
            local out, code = helper.run(EPHD .. " policy shadow" .. url)
            assert.equals(0, code, out)
            assert.truthy(out:find("shadow plan-tiers-strict v2 from "
                                   .. STRICT, 1, true), out)
            assert.matches(": running\n", out)
            assert.matches("2 requests judged, 1 disagreement\n", out)
            assert.matches("\nLIVE%s+SHADOW%s+REQUESTS\n", out)
            assert.matches("\npass%s+%->%s+rate_limited%s+1\n"
                           .. "pass%s+==%s+pass%s+1\n", out)
            assert.matches("\n" .. DEFAULT_TENANT:gsub("%-", "%%-")
                           .. "%s+1\n", out)
            assert.matches("%d%d:%d%d:%d%d%s+push%s+" .. DEFAULT_TENANT
                           :gsub("%-", "%%-") .. "%s+pass%s+rate_limited"
                           .. "%s+rate\n", out)
            -- --watch re-prints until interrupted.
            out = helper.run("timeout 1.5 " .. EPHD .. " policy shadow "
                             .. "--watch --interval 0.2" .. url)
            local frames = select(2, out:gsub("%d%d:%d%d:%d%d  http://", ""))
            assert.is_true(frames >= 3, out)
            assert.is_nil(out:find("\27", 1, true))
            -- None, disabled, and what it does not know.
            d:request("DELETE", SHADOW)
            out, code = helper.run(EPHD .. " policy shadow" .. url)
            assert.equals(0, code)
            assert.matches("no shadow policy is loaded", out)
            out, code = helper.run(EPHD .. " policy shadow --bogus")
            assert.equals(2, code)
            assert.matches("unknown option %-%-bogus", out)
            out, code = helper.run(EPHD .. " policy shadow --help")
            assert.equals(0, code)
            assert.matches("usage: ephd policy shadow", out)
            out, code = helper.run(EPHD .. " policy shadow "
                                   .. "--url http://127.0.0.1:1")
            assert.equals(1, code)
            assert.truthy(out:find("http://127.0.0.1:1", 1, true))
        end)

        it("says when and why the shadow was disabled", function()
            local d = plan_tiers({ args = { "--shadow-policy " .. POLICIES
                                            .. "breaks-mid-traffic" } })
            finally(function() d:stop() end)
            for i = 1, 4 do d:push("q", { tostring(i) }) end
            local out = helper.run(EPHD .. " policy shadow --url "
                                   .. "http://127.0.0.1:" .. d.port)
            assert.matches(": DISABLED\n", out)
            assert.matches("\ndisabled at [^\n]*: its cost hook failed: "
                           .. "[^\n]*the candidate broke", out)
        end)
    end)

    describe("with tenancy headers", function()
        local d
        local OPERATOR = { authorization = "Bearer operator" }
        lazy_setup(function()
            d = daemon.start({
                env = { QUEEN_TENANCY_HEADER = "true",
                        QUEEN_EPHEMERAL_REQUIRE_GRANT = "false" },
                args = { "--policy-dir " .. POLICIES .. "operator",
                         "--shadow-policy " .. POLICIES .. "lockdown" } })
        end)
        lazy_teardown(function() d:stop() end)

        it("is the admin's alone", function()
            local rw = { ["x-queen-tenant"] = DEFAULT_TENANT }
            for _, r in ipairs({ { "GET", SHADOW }, { "DELETE", SHADOW },
                                 { "POST", SHADOW, '{"dir":"/x"}' },
                                 { "POST", PROMOTE } }) do
                assert.refused_with("forbidden",
                                    d:request(r[1], r[2], r[3], rw))
            end
            assert.equals("lockdown", shadow_of(d, OPERATOR).name)
        end)

        it("keeps a bounded table of tenants, the busiest first", function()
            local before = shadow_of(d, OPERATOR).disagreements
            local heavy = "ffffffff-ffff-ffff-ffff-ffffffffffff"
            for i = 1, 40 do
                assert.equals(201, d:push("q", { "1" }, nil,
                                          { ["x-queen-tenant"] = heavy })
                    .status)
            end
            -- Many tenant ids, each seen once: the table does not grow.
            for i = 1, 300 do
                local tenant = ("%08x-0000-0000-0000-000000000000"):format(i)
                assert.equals(201, d:push("q", { "1" }, nil,
                                          { ["x-queen-tenant"] = tenant })
                    .status)
            end
            local s = shadow_of(d, OPERATOR)
            assert.equals(before + 340, s.disagreements)
            assert.equals(340, pair(s, "pass", "unauthorized"))
            assert.is_true(#s.tenants <= 20, #s.tenants)
            assert.equals(heavy, s.tenants[1].tenant)
            assert.is_true(s.tenants[1].disagreements >= 40)
            for i = 2, #s.tenants do
                assert.is_true(s.tenants[i].disagreements
                               <= s.tenants[i - 1].disagreements)
            end
            assert.is_true(#s.samples <= 50, #s.samples)
            assert.equals("authenticate", s.samples[1].rung)
            assert.equals("unauthorized", s.samples[1].shadow)
        end)
    end)
end)
