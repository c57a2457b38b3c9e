-- The policy budget holds against policy code that fights it: a hook that
-- swallows the interrupt with pcall, a pattern that backtracks for seconds,
-- a top level that never returns (at boot, on reload and in `ephd policy
-- check`), and memory without bound. Each time the broker answers that
-- request 503 within the budget, keeps serving the rest, and stops on
-- SIGTERM (d:stop() fails a spec whose broker does not).
local daemon = require("e2e.daemon")
local helper = require("helper")

local POLICIES = helper.root .. "/spec/e2e/policies/"
local RELOAD = "/api/v1/system/policy/reload"

local function start(name, env)
    env = env or {}
    env.QUEEN_EPHEMERAL_POLICY_BUDGET_MS = env.QUEEN_EPHEMERAL_POLICY_BUDGET_MS
                                           or "50"
    return daemon.start({ args = { "--policy-dir " .. POLICIES .. name },
                          env = env })
end

-- One request, timed; the answer must come within a second.
local function timed(d, method, path, body, headers)
    local t0 = daemon.now()
    local res = d:request(method, path, body, headers)
    local took = daemon.now() - t0
    assert.is_true(took < 1, path .. " took " .. took .. " s")
    return res
end

local function serves_the_rest(d)
    assert.equals(201, timed(d, "POST", "/api/v1/ephemeral/push",
        '{"queue":"q","messages":[{"payload":1}]}').status)
    assert.equals(200, timed(d, "GET", "/api/v1/system/ephemeral").status)
end

-- Runs a shell command under `timeout`, so a hang fails instead of
-- hanging the suite; returns its output and exit status.
-- A boot that hangs must not hang the suite.
local function run(cmd) return helper.run("timeout 20 " .. cmd) end

describe("the policy budget", function()
    it("holds against a hook that loops inside pcall", function()
        local d = start("loop-in-pcall")
        finally(function() d:stop() end)
        for _ = 1, 3 do
            assert.refused_with("ephemeral_unavailable",
                                timed(d, "GET", "/api/v1/ephemeral/queues"))
            serves_the_rest(d)
        end
        local s = d:request("GET", "/api/v1/system/ephemeral").json
        assert.equals(3, s.policy.failures.authenticate)
    end)

    it("holds inside an xpcall message handler that loops", function()
        local d = start("loop-in-pcall")
        finally(function() d:stop() end)
        assert.refused_with("ephemeral_unavailable", timed(d, "GET",
            "/api/v1/ephemeral/queues", nil, { Authorization = "xpcall" }))
        serves_the_rest(d)
        local out, rc = run(helper.build .. "/ephd policy check " .. POLICIES
                            .. "top-level-xpcall")
        assert.equals(1, rc, out)
        assert.truthy(out:find("time budget", 1, true), out)
    end)

    it("holds inside a pathological pattern, function or method", function()
        local d = start("pattern")
        finally(function() d:stop() end)
        for _, how in ipairs({ "function", "method" }) do
            assert.refused_with("ephemeral_unavailable", timed(d, "GET",
                "/api/v1/ephemeral/queues", nil, { Authorization = how }))
            serves_the_rest(d)
        end
    end)

    it("holds against memory without bound", function()
        local d = start("greedy", {
            QUEEN_EPHEMERAL_POLICY_MAX_BYTES = tostring(64 * 2 ^ 20),
            -- Time is not what stops it here.
            QUEEN_EPHEMERAL_POLICY_BUDGET_MS = "5000" })
        finally(function() d:stop() end)
        -- 1 GiB at once: refused at the allocator.
        assert.refused_with("ephemeral_unavailable", timed(d, "GET",
            "/api/v1/ephemeral/queues", nil, { Authorization = "huge" }))
        serves_the_rest(d)
        -- 16 MiB more kept each call: refused once the state is full,
        -- and from then on, while the broker serves the rest.
        local refused = 0
        for _ = 1, 8 do
            local res = timed(d, "GET", "/api/v1/ephemeral/queues")
            if res.status == 503 then refused = refused + 1 end
        end
        assert.is_true(refused >= 4, refused .. " refused")
        serves_the_rest(d)
        assert.truthy(d:read_log():find("not enough memory", 1, true))
    end)

    it("holds against a top level that never returns, at boot", function()
        local out, rc = run(("%s/ephd --listen 127.0.0.1:%d --policy-dir %s")
            :format(helper.build, daemon.free_port(),
                    POLICIES .. "top-level-loop"))
        assert.equals(2, rc, out)
        assert.truthy(out:find("event=boot_failed", 1, true), out)
        assert.truthy(out:find("time budget", 1, true), out)
    end)

    it("holds against a top level that never returns, on reload",
       function()
        local dir = os.tmpname()
        os.remove(dir)
        assert(os.execute("mkdir -p " .. dir) == 0)
        local d
        -- busted keeps one finally per test: the last one given.
        finally(function()
            if d then d:stop() end
            os.execute("rm -rf " .. dir)
        end)
        local function use(name)
            assert(os.execute(("cp %s%s/init.lua %s/init.lua")
                              :format(POLICIES, name, dir)) == 0)
        end
        use("operator")
        d = daemon.start({ args = { "--policy-dir " .. dir },
            env = { QUEEN_EPHEMERAL_POLICY_BUDGET_MS = "50" } })
        use("top-level-loop")
        local res = timed(d, "POST", RELOAD)
        assert.refused_with("ephemeral_bad_request", res)
        assert.truthy(res.json.error:find("time budget", 1, true))
        os.execute("kill -HUP " .. d.pid)
        assert.truthy(d:await_log("event=policy_reload_refused", 5)
                      :find("event=policy_reload_refused", 1, true))
        serves_the_rest(d)
        assert.equals("operator", d:request("GET", "/api/v1/system/ephemeral")
                                    .json.policy.name)
    end)

    it("holds in `ephd policy check`", function()
        local out, rc = run("env QUEEN_EPHEMERAL_POLICY_BUDGET_MS=50 "
            .. helper.build .. "/ephd policy check " .. POLICIES
            .. "top-level-loop")
        assert.equals(1, rc, out)
        assert.truthy(out:find("time budget", 1, true), out)
    end)
end)

describe("ephd policy check", function()
    it("answers ephd.counters with nil: there is no engine", function()
        local out, rc = run(helper.build .. "/ephd policy check " .. POLICIES
                            .. "counters")
        assert.equals(0, rc, out)
        assert.truthy(out:find("ok (policy counters version 3)", 1, true),
                      out)
    end)
end)
