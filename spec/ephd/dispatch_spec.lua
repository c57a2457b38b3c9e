local cjson = require("cjson")
local ffi = require("ffi")
local helper = require("helper")
local testing = require("ephd.testing")

local DEFAULT = helper.root .. "/policies/default"

describe("ephd.dispatch", function()
    local answers, queues_calls, host

    local function setup(init, config)
        local respond
        respond, answers = helper.responder()
        queues_calls = {}
        helper.core_double({
            ephd_ffi_respond = respond,
            ephd_ffi_now_ms = function() return 0ULL end,
            ephd_ffi_wall_time = function() return 1700000000 end,
            ephd_ffi_queues = function(_, t, tl)
                queues_calls[#queues_calls + 1] = ffi.string(t, tl)
            end,
        }, config)
        host = require("ephd.host")
        local files = init and { init = init } or testing.read(DEFAULT)
        assert(host.init(init and "/p" or DEFAULT, files, DEFAULT,
                         testing.read(DEFAULT)))
    end

    local function call(method, path, extra)
        local t = { method = method, path = path }
        for k, v in pairs(extra or {}) do t[k] = v end
        local req, anchor = helper.request(t)
        helper.slot[0] = req
        host.dispatch()
        return anchor
    end

    it("routes a request to its handler for the default tenant", function()
        setup()
        call("GET", "/api/v1/ephemeral/queues")
        assert.same({ "00000000-0000-0000-0000-000000000001" }, queues_calls)
    end)

    it("answers 404 route_not_found, and 405 with a code of the taxonomy",
       function()
        setup()
        call("GET", "/elsewhere")
        call("PUT", "/api/v1/ephemeral/queues")
        assert.equals(404, answers[1].status)
        assert.equals("route_not_found", cjson.decode(answers[1].body).code)
        assert.equals(405, answers[2].status)
        assert.equals("Allow: GET, HEAD\r\n", answers[2].headers)
        assert.equals("ephemeral_bad_request",
                      cjson.decode(answers[2].body).code)
    end)

    it("takes the identity the authenticate hook returns", function()
        setup('return { name = "id", version = 1, hooks = { authenticate = '
              .. 'function(r) return { tenant = '
              .. '"2B1F0C7E-5F0A-4C9E-9A43-1D2E3F4A5B6C", level = '
              .. '"read-only" } end } }')
        call("GET", "/api/v1/ephemeral/queues")
        assert.same({ "2b1f0c7e-5f0a-4c9e-9a43-1d2e3f4a5b6c" }, queues_calls)
        -- read-only may not push: 403 forbidden, before any shape check.
        call("POST", "/api/v1/ephemeral/push", { body = "not json" })
        assert.equals(403, answers[1].status)
        assert.equals("forbidden", cjson.decode(answers[1].body).code)
    end)

    it("lets authenticate refuse with 401", function()
        setup('return { name = "deny", version = 1, hooks = { authenticate = '
              .. 'function(r) if r.authorization ~= "Bearer ok" then return '
              .. '"unauthorized", "no token for " .. r.route end end } }')
        call("GET", "/api/v1/ephemeral/queues")
        call("GET", "/api/v1/ephemeral/queues", { authorization = "Bearer ok" })
        assert.equals(401, answers[1].status)
        assert.same({ error = "no token for queues", code = "unauthorized" },
                    cjson.decode(answers[1].body))
        assert.equals(1, #queues_calls)
    end)

    it("answers 503 and counts a hook that raises or returns garbage",
       function()
        setup('return { name = "bad", version = 1, hooks = { authenticate = '
              .. 'function(r) if r.route == "queues" then error("boom") end '
              .. 'return "teapot" end } }')
        call("GET", "/api/v1/ephemeral/queues")
        call("POST", "/api/v1/ephemeral/push")
        assert.equals(503, answers[1].status)
        assert.equals(503, answers[2].status)
        assert.equals("ephemeral_unavailable",
                      cjson.decode(answers[2].body).code)
        assert.equals(2, require("ephd.hooks").failures.authenticate)
        assert.equals(0, #queues_calls)
    end)

    it("refuses a malformed tenant header as unauthorized", function()
        setup(nil, { tenancy_header = 1 })
        call("GET", "/api/v1/ephemeral/queues", { tenant = "x" })
        assert.equals(401, answers[1].status)
    end)

    it("gates tenants without a grant when grants are required", function()
        setup(nil, { require_grant = 1 })
        call("GET", "/api/v1/ephemeral/queues")
        assert.equals(403, answers[1].status)
        assert.equals("feature_gated", cjson.decode(answers[1].body).code)
        -- The system routes are not gated.
        call("GET", "/api/v1/system/ephemeral")
        assert.equals(200, answers[2].status)
    end)

    -- The fixed rungs (routing, access, grant) make no Lua string or
    -- table: with a handler that makes none, a request allocates only the
    -- box of its pointer, read from the slot C fills.
    it("routes and checks access and the grant without allocating",
       function()
        local served = 0
        helper.core_double({
            ephd_ffi_queues = function() served = served + 1 end,
        })
        host = require("ephd.host")
        assert(host.init(DEFAULT, testing.read(DEFAULT), DEFAULT,
                         testing.read(DEFAULT)))
        local req, anchor = helper.request({
            method = "GET", path = "/api/v1/ephemeral/queues" })
        local slot, kept = helper.slot, {}
        slot[0] = req
        -- Each call enters f from outside any trace, as the broker's C
        -- does for each request: traced, this loop would put f inside its
        -- own trace, and its shape (and what is boxed at its edges) would
        -- depend on when the JIT gave up on it.
        local function run(f, n) for _ = 1, n do f() end end
        jit.off(run)
        local function bytes(f) -- per call, once warm (traces compiled)
            -- Traces compiled for the requests of earlier specs in this
            -- process would be linked to, and their side exits make this
            -- request's values boxed: a few runs in a hundred measured
            -- 72 bytes.
            jit.flush()
            run(f, 20000)
            collectgarbage("collect")
            collectgarbage("stop")
            local before = collectgarbage("count")
            run(f, 10000)
            local kib = collectgarbage("count") - before
            collectgarbage("restart")
            return kib * 1024 / 10000
        end
        local function box() kept.req = slot[0] end
        jit.off(box) -- compiled, the box is made once outside the loop
        local per_box, per_request = bytes(box), bytes(host.dispatch)
        assert.equals(30000, served)
        assert.is_true(per_request < per_box + 1,
                       per_request .. " bytes a request, its pointer's box "
                       .. per_box)
        assert.truthy(anchor)
    end)

    it("gives a shadow only the request the ladder just decided", function()
        setup()
        assert(host.shadow("/c", { init = 'return { name = "c", '
            .. 'version = 1, hooks = {} }' }, DEFAULT, testing.read(DEFAULT)))
        local shadow = require("ephd.shadow").current
        call("GET", "/api/v1/ephemeral/queues")
        host.observe()
        assert.equals(1, shadow.decisions)
        -- A dispatch that raised is not observed (C skips the call): the
        -- next request, one no rung decides, leaves the shadow nothing to
        -- judge, not the request before it, whose buffers are gone.
        local double = require("ephd.core").C
        rawset(double, "ephd_ffi_queues", function() error("broke") end)
        assert.has_error(function() call("GET", "/api/v1/ephemeral/queues") end)
        call("GET", "/health")
        host.observe()
        call("GET", "/elsewhere")
        host.observe()
        assert.equals(1, shadow.decisions)
    end)

    it("keeps the old policy when a reload does not load", function()
        setup()
        local ok, err = host.reload("/p", { init = "error('typo')" },
                                    DEFAULT, testing.read(DEFAULT))
        assert.is_nil(ok)
        assert.truthy(err:find("typo", 1, true))
        assert.equals("default", require("ephd.hooks").active.name)
        assert.is_true((host.reload("/p", { init = 'return { name = "n", '
            .. 'version = 2, hooks = {} }' }, DEFAULT, testing.read(DEFAULT))))
        assert.equals("n", require("ephd.hooks").active.name)
    end)
end)
