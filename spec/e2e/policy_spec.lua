-- The operator's policy, live: reloads that keep the old policy when the
-- new one is broken, reloads that take effect on the next request, and
-- hooks that fail without taking the broker down.
local daemon = require("e2e.daemon")
local helper = require("helper")

local RELOAD = "/api/v1/system/policy/reload"

local function policy_dir(init)
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) == 0)
    local f = assert(io.open(dir .. "/init.lua", "w"))
    f:write(init)
    f:close()
    return dir
end

local function write(dir, init)
    local f = assert(io.open(dir .. "/init.lua", "w"))
    f:write(init)
    f:close()
end

local function rate_policy(rate)
    return ('return { name = "rates", version = %d, hooks = { limits = '
            .. 'function() return { rate = %d, burst = %d } end } }')
        :format(rate, rate, rate)
end

describe("policy reload", function()
    it("keeps serving with the old policy when the new one does not load",
       function()
        local dir = policy_dir(rate_policy(1000))
        local d = daemon.start({ args = { "--policy-dir " .. dir } })
        finally(function() d:stop() end)
        write(dir, "return { name = 'broken', version = 2, hooks = { "
                   .. "limits = function( }")
        local res = d:request("POST", RELOAD)
        assert.refused_with("ephemeral_bad_request", res)
        assert.truthy(res.json.error:find("previous one stays", 1, true))
        assert.truthy(res.json.error:find("init.lua", 1, true))
        assert.equals(201, d:push("q", { "1" }).status)
        local s = d:request("GET", "/api/v1/system/ephemeral").json
        assert.equals("rates", s.policy.name)
        assert.equals(1, s.policy.reloads.refused)
    end)

    it("applies a tightened rate on the next request, with no restart",
       function()
        local dir = policy_dir(rate_policy(1000))
        local d = daemon.start({ args = { "--policy-dir " .. dir } })
        finally(function() d:stop() end)
        assert.equals(201, d:push("q", { "1", "2", "3" }).status)
        write(dir, rate_policy(2))
        local res = d:request("POST", RELOAD)
        assert.equals(200, res.status)
        assert.same({ reloaded = true,
                      policy = { name = "rates", version = 2 } }, res.json)
        -- The bucket now holds at most the new burst of two: two messages
        -- pass, a third in the same second does not (under the old policy
        -- it would have).
        assert.equals(201, d:push("q", { "1", "2" }).status)
        local refused = d:push("q", { "3" })
        assert.refused_with("rate_limited", refused)
        assert.equals("1", refused.headers["retry-after"])
    end)

    it("reloads on SIGHUP, reporting a refusal in the log", function()
        local dir = policy_dir(rate_policy(1000))
        local d = daemon.start({ args = { "--policy-dir " .. dir } })
        finally(function() d:stop() end)
        write(dir, "error('nope')")
        os.execute("kill -HUP " .. d.pid)
        assert.truthy(d:await_log("event=policy_reload_refused", 5)
                      :find("nope", 1, true))
        assert.equals(201, d:push("q", { "1" }).status)
        write(dir, rate_policy(2))
        os.execute("kill -HUP " .. d.pid)
        d:await_log("event=policy_reloaded", 5)
        assert.equals(201, d:push("q", { "1", "2" }).status)
        assert.refused_with("rate_limited", d:push("q", { "3" }))
    end)

    it("reloads after the load in flight on a SIGHUP that came during it",
       function()
        -- A SIGHUP while a shadow's load reads its files (a hundred
        -- modules of 1 MiB: long enough to land in) was dropped
        -- (policy_reload_busy): an edit of the live policy never loaded.
        local dir = policy_dir(rate_policy(1000))
        local big = policy_dir(rate_policy(5))
        local filler = ("-- filler\n"):rep(100000)
        for i = 1, 100 do
            local f = assert(io.open(big .. "/filler" .. i .. ".lua", "w"))
            f:write(filler)
            f:close()
        end
        local d = daemon.start({ args = { "--policy-dir " .. dir } })
        -- busted keeps one finally per test: the last one given.
        finally(function()
            d:stop()
            os.execute("rm -rf " .. big)
        end)
        local c = d:connect()
        c:send(daemon.format("POST", "/api/v1/system/policy/shadow",
                             '{"dir":"' .. big .. '"}'))
        os.execute("kill -HUP " .. d.pid)
        assert(c:receive(10))
        c:close()
        local reloads
        for _ = 1, 50 do
            reloads = d:request("GET", "/api/v1/system/ephemeral").json
                       .policy.reloads.ok
            if reloads == 1 then break end
            daemon.sleep(0.1)
        end
        assert.equals(1, reloads, d:read_log())
    end)
end)

describe("policy faults", function()
    it("answers 503 for a hook that raises, counts it, serves the rest",
       function()
        local dir = policy_dir('return { name = "faulty", version = 1, '
            .. 'hooks = { cost = function(p) if p.queue == "bad" then '
            .. 'error("broken hook") end return p.messages end } }')
        local d = daemon.start({ args = { "--policy-dir " .. dir } })
        finally(function() d:stop() end)
        for _ = 1, 20 do
            assert.refused_with("ephemeral_unavailable", d:push("bad", { "1" }))
        end
        assert.equals(201, d:push("good", { "1" }).status)
        local s = d:request("GET", "/api/v1/system/ephemeral").json
        assert.equals(20, s.policy.failures.cost)
        -- Logged once per burst, not once per request.
        local _, lines = d:read_log():gsub("event=policy_hook_failed [^\n]*"
                                           .. "hook=cost", "")
        assert.is_true(lines >= 1 and lines <= 2, lines .. " lines")
    end)

    it("interrupts a hook that never returns, answers 503, serves the rest",
       function()
        local dir = policy_dir('return { name = "stuck", version = 1, '
            .. 'hooks = { authenticate = function(r) if r.route == "queues" '
            .. 'then while true do end end end } }')
        local d = daemon.start({ args = { "--policy-dir " .. dir },
            env = { QUEEN_EPHEMERAL_POLICY_BUDGET_MS = "50" } })
        finally(function() d:stop() end)
        for _ = 1, 3 do
            local t0 = daemon.now()
            local res = d:request("GET", "/api/v1/ephemeral/queues")
            local took = daemon.now() - t0
            assert.refused_with("ephemeral_unavailable", res)
            assert.is_true(took < 1, "took " .. took)
        end
        -- The loop was never blocked for long: other routes are served.
        assert.equals(201, d:push("q", { "1" }).status)
        local s = d:request("GET", "/api/v1/system/ephemeral").json
        assert.equals(3, s.policy.failures.authenticate - 0)
        assert.truthy(d:read_log():find("time budget", 1, true))
    end)

    it("refuses a reload whose top level never returns", function()
        local dir = policy_dir('return { name = "ok", version = 1, hooks = {} }')
        local d = daemon.start({ args = { "--policy-dir " .. dir },
            env = { QUEEN_EPHEMERAL_POLICY_BUDGET_MS = "50" } })
        finally(function() d:stop() end)
        write(dir, 'while true do end')
        local res = d:request("POST", RELOAD)
        assert.refused_with("ephemeral_bad_request", res)
        assert.truthy(res.json.error:find("time budget", 1, true))
        assert.equals(201, d:push("q", { "1" }).status)
    end)

    it("answers 503 for a cost of NaN and keeps the tenant's bucket",
       function()
        local dir = policy_dir('return { name = "nan", version = 1, '
            .. 'hooks = { cost = function(p) if p.queue == "nan" then '
            .. 'return 0 / 0 end if p.queue == "inf" then return 1 / 0 end '
            .. 'return p.messages end, limits = function() return '
            .. '{ rate = 10, burst = 10 } end } }')
        local d = daemon.start({ args = { "--policy-dir " .. dir } })
        finally(function() d:stop() end)
        assert.refused_with("ephemeral_unavailable", d:push("nan", { "1" }))
        assert.refused_with("ephemeral_unavailable", d:push("inf", { "1" }))
        -- Before, the bucket held NaN and refused every push after with
        -- Retry-After: nan, until a restart.
        assert.equals(201, d:push("q", { "1" }).status)
        local res = d:push("q", { "1", "2", "3", "4", "5", "6", "7", "8", "9",
                                  "10" })
        assert.refused_with("rate_limited", res)
        assert.equals("1", res.headers["retry-after"])
    end)

    it("answers 503 for a hook that returns garbage", function()
        local dir = policy_dir('return { name = "garbage", version = 1, '
            .. 'hooks = { authenticate = function() return 42 end } }')
        local d = daemon.start({ args = { "--policy-dir " .. dir } })
        finally(function() d:stop() end)
        assert.refused_with("ephemeral_unavailable",
                            d:request("GET", "/api/v1/ephemeral/queues"))
    end)
end)

describe("metering", function()
    it("counts pushes as messages and pops as deliveries, per tenant",
       function()
        local d = daemon.start()
        finally(function() d:stop() end)
        d:push("m", { "1", "2", "3" })
        d:pop("queue=m&group=a&batch=10")
        d:pop("queue=m&group=b&batch=2")
        local t = d:request("GET", "/api/v1/system/metering").json.tenants[1]
        assert.equals(3, t.pushed)
        assert.equals(5, t.delivered)
        assert.equals(1, t.queues)
        assert.same({ bounds = 0, ttl = 0, retry = 0 }, t.drops)
    end)

    it("answers one tenant, or the biggest few, never every tenant",
       function()
        local d = daemon.start({ env = { QUEEN_TENANCY_HEADER = "true",
            QUEEN_EPHEMERAL_REQUIRE_GRANT = "false" }, args = {
            "--policy-dir " .. helper.root .. "/spec/e2e/policies/operator" } })
        finally(function() d:stop() end)
        local ADMIN = { Authorization = "Bearer operator" }
        for i = 1, 30 do
            local h = { ["x-queen-tenant"] =
                ("%08d-0000-0000-0000-000000000000"):format(i) }
            assert.equals(201, d:push("m", { ('"%s"'):format(("x"):rep(i)) },
                                      nil, h).status)
        end
        local m = d:request("GET", "/api/v1/system/metering?limit=3", nil,
                            ADMIN).json
        assert.equals(30, m.count)
        assert.equals(3, #m.tenants)
        assert.equals("00000030-0000-0000-0000-000000000000",
                      m.tenants[1].tenant)
        -- Most bytes first: the footprint grows with the payload.
        assert.is_true(m.tenants[1].bytes > m.tenants[2].bytes)
        assert.is_true(m.tenants[2].bytes > m.tenants[3].bytes)
        assert.equals("00000028-0000-0000-0000-000000000000",
                      m.tenants[3].tenant)
        -- By default the first hundred: here all of them.
        assert.equals(30, #d:request("GET", "/api/v1/system/metering", nil,
                                     ADMIN).json.tenants)
        m = d:request("GET", "/api/v1/system/metering?tenant="
                      .. "00000007-0000-0000-0000-000000000000", nil, ADMIN).json
        assert.equals(1, #m.tenants)
        assert.equals(1, m.tenants[1].pushed)
        m = d:request("GET", "/api/v1/system/metering?tenant="
                      .. "99999999-0000-0000-0000-000000000000", nil, ADMIN).json
        assert.same({}, m.tenants)
        for _, q in ipairs({ "limit=0", "limit=1001", "tenant=nope",
                             "limit=2&tenant=00000007-0000-0000-0000-"
                             .. "000000000000", "sort=bytes" }) do
            assert.refused_with("ephemeral_bad_request", d:request("GET",
                "/api/v1/system/metering?" .. q, nil, ADMIN))
        end
    end)

    it("hands the counters to the meter hook, which the log records",
       function()
        local dir = policy_dir('return { name = "billing", version = 1, '
            .. 'hooks = { meter = function(deltas) local out = {} '
            .. 'for _, t in ipairs(deltas) do out[#out + 1] = { tenant = '
            .. 't.tenant, units = t.pushed + t.delivered } end return out '
            .. 'end } }')
        local d = daemon.start({ args = { "--policy-dir " .. dir },
                                 env = { QUEEN_EPHEMERAL_METER_S = "1" } })
        finally(function() d:stop() end)
        d:push("m", { "1", "2" })
        d:pop("queue=m&batch=10")
        local log = d:await_log("units=4", 3)
        assert.truthy(log:find(
            "event=meter [^\n]*tenant=00000000%-0000%-0000%-0000%-000000000001"))
        assert.truthy(log:find("units=4", 1, true))
    end)
end)

describe("ephd policy check", function()
    local function run(dir)
        local p = io.popen(helper.build .. "/ephd policy check " .. dir
                           .. " 2>&1; echo rc=$?")
        local out = p:read("*a")
        p:close()
        return out, tonumber(out:match("rc=(%d+)"))
    end

    it("reports a directory that loads", function()
        local out, rc = run(helper.root .. "/examples/policies/plan-tiers")
        assert.equals(0, rc)
        assert.truthy(out:find("ok (policy plan-tiers version 1)", 1, true))
    end)

    it("reports what is wrong, without starting a broker", function()
        local out, rc = run(policy_dir("return { name = 1 }"))
        assert.equals(1, rc)
        assert.truthy(out:find("must return {name, version, hooks}", 1, true))
    end)
end)
