local cjson = require("cjson")
local ffi = require("ffi")
local helper = require("helper")

local function policy_dir(init)
    local d = os.tmpname()
    os.remove(d)
    os.execute("mkdir -p " .. d)
    local f = io.open(d .. "/init.lua", "w")
    f:write(init)
    f:close()
    return d
end

describe("ephd.dispatch", function()
    local answers, queues_calls, dispatch

    local function setup(init)
        local respond
        respond, answers = helper.responder()
        queues_calls = {}
        helper.core_double({
            ephd_respond = respond,
            ephd_queues = function(_, t, tl)
                queues_calls[#queues_calls + 1] = ffi.string(t, tl)
            end,
        })
        dispatch = require("ephd.dispatch")
        assert(dispatch.init(init and policy_dir(init)
                             or helper.root .. "/policies/default"))
    end

    local function call(method, path, extra)
        local t = { method = method, path = path }
        for k, v in pairs(extra or {}) do t[k] = v end
        local req, anchor = helper.request(t)
        dispatch.dispatch(req)
        return anchor
    end

    it("routes a request to its handler for the default tenant", function()
        setup()
        call("GET", "/api/v1/ephemeral/queues")
        assert.same({ "00000000-0000-0000-0000-000000000001" }, queues_calls)
    end)

    it("answers 404 and 405 with codes of the taxonomy", function()
        setup()
        call("GET", "/elsewhere")
        call("PUT", "/api/v1/ephemeral/queues")
        assert.equals(404, answers[1].status)
        assert.equals(405, answers[2].status)
        assert.equals("Allow: GET\r\n", answers[2].headers)
        assert.equals("ephemeral_bad_request",
                      cjson.decode(answers[2].body).code)
    end)

    it("lets authenticate refuse with a code of the taxonomy", function()
        setup('return { name = "deny", version = 1, hooks = { authenticate = '
              .. 'function(r) if r.authorization ~= "Bearer ok" then return '
              .. '"feature_gated", "no grant for " .. r.route end end } }')
        call("GET", "/api/v1/ephemeral/queues")
        call("GET", "/api/v1/ephemeral/queues", { authorization = "Bearer ok" })
        assert.equals(403, answers[1].status)
        assert.same({ error = "no grant for queues", code = "feature_gated" },
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
        assert.equals(2, dispatch.hook_failures)
        assert.equals(0, #queues_calls)
    end)

    it("refuses a malformed tenant header when tenancy is on", function()
        local respond
        respond, answers = helper.responder()
        helper.core_double({ ephd_respond = respond }, { tenancy_header = 1 })
        dispatch = require("ephd.dispatch")
        assert(dispatch.init(helper.root .. "/policies/default"))
        call("GET", "/api/v1/ephemeral/queues", { tenant = "x" })
        assert.equals(400, answers[1].status)
    end)

    it("reports a policy directory that does not load", function()
        helper.core_double({})
        dispatch = require("ephd.dispatch")
        local ok, err = dispatch.init("/nonexistent")
        assert.is_nil(ok)
        assert.is_string(err)
    end)
end)
