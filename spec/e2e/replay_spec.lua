-- `ephd policy replay` against a real broker's log: plan-tiers live with
-- the request log on, traffic driven, and the log replayed against a
-- stricter candidate names exactly the requests it would have refused.
local daemon = require("e2e.daemon")
local helper = require("helper")

local EPHD = helper.build .. "/ephd"
local PLAN_TIERS = helper.root .. "/examples/policies/plan-tiers"
local STRICT = helper.root .. "/spec/e2e/policies/replay-strict"
local PRO = "11111111-1111-1111-1111-111111111111"
local FREE = "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"

local function as(tenant) return { ["x-queen-tenant"] = tenant } end

local function replay(args)
    return helper.run(EPHD .. " policy replay " .. args .. " 2>&1")
end

describe("ephd policy replay", function()
    local log

    lazy_setup(function()
        local d = daemon.start({
            args = { "--policy-dir " .. PLAN_TIERS },
            env = { QUEEN_EPHEMERAL_LOG_REQUESTS = "true",
                    QUEEN_TENANCY_HEADER = "true",
                    QUEEN_EPHEMERAL_REQUIRE_GRANT = "false" } })
        -- The free plan live: 100 a second, 200 at once. The candidate's:
        -- one a second, two at once.
        for i = 1, 5 do
            assert.equals(201, d:push("q", { tostring(i) }, nil,
                                      as(FREE)).status)
            assert.equals(201, d:push("q", { tostring(i) }, nil,
                                      as(PRO)).status)
        end
        assert.equals(200, d:pop("queue=q&batch=10", as(FREE)).status)
        -- A second and more later the candidate's bucket holds a token
        -- again: served by both.
        daemon.sleep(1.2) -- elapsed time: the candidate's refill
        assert.equals(201, d:push("q", { "6" }, nil, as(FREE)).status)
        assert.equals(201, d:push("q", { "7" }, nil, as(FREE)).status)
        assert.refused_with("unauthorized", d:push("q", { "8" }, nil,
                                                   as("not-a-uuid")))
        -- The log as an operator keeps it: the daemon's goes with it.
        local text = d:await_log("code=unauthorized", 5)
        d:stop()
        log = os.tmpname()
        local f = assert(io.open(log, "w"))
        f:write(text)
        f:close()
    end)

    lazy_teardown(function() os.remove(log) end)

    it("names exactly the requests the candidate would have refused",
       function()
        local out, code = replay("--policy " .. STRICT .. " --log " .. log)
        assert.equals(0, code, out)
        assert.matches("replay%-strict v1", out)
        assert.matches("cannot replay:\n  %- credentials are not logged", out)
        assert.matches("14 requests replayed %(0 kept as logged, 0 relayed "
                       .. "at their owner skipped, 1 broker start%); 4 "
                       .. "answered differently", (out:gsub("\n", " ")))
        assert.matches("\n  pass%s+rate_limited%s+4\n", out)
        assert.matches("\n  " .. FREE:gsub("%-", "%%-") .. "%s+4\n", out)
        -- The free tenant's third to fifth pushes, and its seventh.
        local rows = {}
        for row in out:match("first 4 differences:\n.-\n(.*)$")
                      :gmatch("[^\n]+") do
            rows[#rows + 1] = row
        end
        assert.equals(4, #rows)
        for _, row in ipairs(rows) do
            assert.matches("push%s+" .. FREE:gsub("%-", "%%-")
                           .. "%s+pass%s+rate_limited%s+rate$", row)
        end
        -- The live policy against its own traffic: nothing differs.
        out, code = replay("--policy " .. PLAN_TIERS .. " --log " .. log)
        assert.equals(0, code, out)
        assert.matches("; 0 answered differently\n$", (out:gsub("\n(.)", " %1")))
    end)

    it("takes grants as `ephd grant list --json` prints them", function()
        local grants = os.tmpname()
        finally(function() os.remove(grants) end)
        local f = assert(io.open(grants, "w"))
        f:write('{"grants":[{"tenant":"' .. FREE .. '","enabled":true,'
                .. '"maxBytes":null,"maxQueues":null,"maxMsgsPerSec":null}],'
                .. '"count":1,"requireGrant":true}')
        f:close()
        -- The log's settings say no grant is required: they win.
        local out = replay("--policy " .. STRICT .. " --log " .. log
                           .. " --grants " .. grants)
        assert.matches("; 4 answered differently", (out:gsub("\n", " ")))
    end)

    it("exits 1 on a policy that does not load, 2 on a log it cannot read",
       function()
        local out, code = replay("--policy /nonexistent --log " .. log)
        assert.equals(1, code)
        assert.matches("init.lua is missing", out)
        out, code = replay("--policy " .. STRICT .. " --log /nonexistent")
        assert.equals(2, code)
        assert.matches("/nonexistent", out)
        out, code = replay("--policy " .. STRICT .. " --log /tmp")
        assert.equals(2, code)
        assert.matches("^ephd policy replay: /tmp: ", out)
        out, code = replay("--policy " .. STRICT)
        assert.equals(2, code)
        assert.matches("usage: ephd policy replay", out)
    end)
end)
