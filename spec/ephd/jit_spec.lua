-- The hot path stays on the JIT: push, pop and ack are dispatched a
-- thousand times each and no trace may abort on something LuaJIT does not
-- compile (NYI) inside lua/ephd or a builtin it calls. A change
-- that knocks them off (an NYI conversion, a pattern in a loop) fails here
-- rather than in a benchmark a week later.
local ffi = require("ffi")
local jit = require("jit")
local jutil = require("jit.util")
local vmdef = require("jit.vmdef")
local helper = require("helper")
local testing = require("ephd.testing")

local DEFAULT = helper.root .. "/policies/default"

-- How LuaJIT picks where traces start and end: it gives up a trace to
-- begin a better one at a loop or a frame it returned below. Not a failure
-- to compile.
local SELECTION = {
    ["leaving loop in root trace"] = true,
    ["inner loop in root trace"] = true,
    ["loop unroll limit reached"] = true,
    ["NYI: return to lower frame"] = true,
}

local PLAN_TIERS = helper.root .. "/examples/policies/plan-tiers"

-- Dispatches push, pop and ack a thousand times each under the policy in
-- dir, with a shadow of shadow_dir when given; returns the aborts.
local function aborts_of(dir, shadow_dir)
    local answered = 0
    helper.core_double({
        ephd_ffi_respond = function() answered = answered + 1 end,
        ephd_ffi_now_ms = function() return 0ULL end,
        ephd_ffi_wall_time = function() return 0 end,
        ephd_ffi_tenant_stats = function() return -3 end,
        ephd_ffi_push_scan = function(req)
            local scan = req.op.scan
            scan.queue.ptr, scan.queue.len = "q", 1
            scan.partition.ptr, scan.partition.len = "Default", 7
            scan.count, scan.bytes = 1, 8
            return 0
        end,
        ephd_ffi_push_commit = function() return 0 end,
        ephd_ffi_pop = function() answered = answered + 1 return 0 end,
        ephd_ffi_ack_scan = function(req)
            local scan = req.op.scan
            scan.queue.ptr, scan.queue.len = "q", 1
            scan.has_group = 0
            return 0
        end,
        ephd_ffi_ack_commit = function() answered = answered + 1 return 0 end,
    }, { rate = 0 })
    local host = require("ephd.host")
    assert(host.init(dir, testing.read(dir), DEFAULT,
                     testing.read(DEFAULT)))
    if shadow_dir then
        assert(host.shadow(shadow_dir, testing.read(shadow_dir), DEFAULT,
                           testing.read(DEFAULT)))
    end
    local anchors = {}
    local function request(t)
        local req, anchor = helper.request(t)
        anchors[#anchors + 1] = anchor
        return req
    end
    local reqs = {
        request({ method = "POST", path = "/api/v1/ephemeral/push",
                         body = '{"queue":"q","messages":[]}' }),
        request({ method = "GET", path = "/api/v1/ephemeral/pop",
                         query = "queue=q&group=g&batch=10" }),
        request({ method = "POST", path = "/api/v1/ephemeral/ack",
                         body = '{"queue":"q","acks":[]}' }),
    }
    local aborts = {}
    local function on_trace(what, _, func, pc, code, extra)
        if what ~= "abort" then return end
        local info = jutil.funcinfo(func, pc)
        local why = vmdef.traceerr[code] or tostring(code)
        -- No source: the abort is inside a builtin (ffi.cast, say)
        -- that our code called; the loop and fakes here call none.
        local ours = info.source == nil
                     or info.source:find("/lua/ephd/", 1, true)
        -- NYI is what knocks code off the JIT for good (as converting a
        -- lightuserdata once did to every dispatch); other aborts are
        -- retried elsewhere by the JIT itself.
        if ours and why:find("^NYI") and not SELECTION[why] then
            aborts[#aborts + 1] = ("%s:%s %s"):format(
                info.source, tostring(info.currentline),
                why:format(extra))
        end
    end
    -- Only locals in the driving loop: a global read goes through
    -- busted's environment, whose own trace aborts would hide ours.
    local slot = helper.slot
    local run = host.dispatch
    -- As C calls them: observe after dispatch while a shadow is loaded.
    if shadow_dir then
        local observe = host.observe
        run = function()
            host.dispatch()
            observe()
        end
    end
    local push, pop, ack = reqs[1], reqs[2], reqs[3]
    jit.flush()
    jit.attach(on_trace, "trace")
    for _ = 1, 1000 do
        slot[0] = push
        run()
        slot[0] = pop
        run()
        slot[0] = ack
        run()
    end
    jit.attach(on_trace)
    assert.equals(3000, answered)
    assert.equals(3, #anchors)
    return aborts
end

describe("the hot path", function()
    it("runs push, pop and ack without a trace abort in lua/ephd", function()
        assert.same({}, aborts_of(DEFAULT))
        assert.truthy(ffi)
    end)

    it("stays on the JIT with a shadow policy judging it", function()
        assert.same({}, aborts_of(PLAN_TIERS, PLAN_TIERS))
        local s = require("ephd.shadow").current
        assert.equals("running", s.state)
        assert.equals(3000, s.decisions)
    end)
end)
