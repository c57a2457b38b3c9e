-- One contract per hook: a result the broker refuses (answering 503 and
-- logging policy_hook_failed) fails an operator's spec through
-- ephd.testing, with the very message the broker logs. Each case is a
-- policy directory on disk, driven once through ephd.testing and once
-- through the broker's own dispatch.
local cjson = require("cjson")
local ffi = require("ffi")
local helper = require("helper")
local testing = require("ephd.testing")

local DEFAULT = helper.root .. "/policies/default"

-- A directory holding init.lua with one hook returning `result` (Lua
-- source).
local function policy_dir(hook, result)
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p '" .. dir .. "'"))
    local f = assert(io.open(dir .. "/init.lua", "wb"))
    f:write(('return { name = "c", version = 1, hooks = { %s = '
             .. 'function() return %s end } }'):format(hook, result))
    f:close()
    return dir
end

-- The value of `key` in a logfmt line (quoted or not).
local function logfmt(fields, key)
    local quoted = fields:match(key .. '="(.-[^\\])"')
    if quoted then return (quoted:gsub('\\(.)', "%1")) end
    return fields:match(key .. "=(%S+)")
end

-- Runs the broker over one request (or the metering tick), with the
-- policy in dir; returns what it logged for the hook and its answer.
local function broker(dir, hook)
    local logged, answer = {}, nil
    local keep = { "q", "Default", "t" }
    helper.core_double({
        ephd_ffi_respond = function(_, status, _, body, len)
            answer = { status = status, body = ffi.string(body, len) }
        end,
        ephd_ffi_now_ms = function() return 0ULL end,
        ephd_ffi_log_fields = function(_, event, fields)
            logged[ffi.string(event)] = ffi.string(fields)
        end,
        ephd_ffi_queues = function() answer = { status = 200 } end,
        ephd_ffi_push_scan = function(req)
            local scan = req.op.scan
            scan.queue.ptr, scan.queue.len = keep[1], 1
            scan.partition.ptr, scan.partition.len = keep[2], 7
            scan.count, scan.bytes = 1, 1
            return 0
        end,
        ephd_ffi_push_commit = function() return 0 end,
        ephd_ffi_tenant_next = function(pos, name, stats)
            if pos[0] > 0 then return -3 end
            pos[0] = 1
            name.ptr, name.len = keep[3], 1
            stats.pushed = 1
            return 0
        end,
    }, { rate = 0 })
    local host = require("ephd.host")
    assert(host.init(dir, testing.read(dir), DEFAULT,
                     testing.read(DEFAULT)))
    if hook == "meter" then
        host.meter()
    else
        local req = helper.request((hook == "cost" or hook == "limits")
            and { method = "POST", path = "/api/v1/ephemeral/push" }
            or { method = "GET", path = "/api/v1/ephemeral/queues" })
        helper.slot[0] = req
        host.dispatch()
    end
    local line = logged.policy_hook_failed
    assert.is_string(line, "the broker logged no failure of " .. hook)
    assert.equals(hook, logfmt(line, "hook"))
    return logfmt(line, "error"), answer
end

-- The same hook through ephd.testing, as an operator's spec calls it.
local function spec(dir, hook)
    local p = assert(testing.load(dir))
    local ok, err = pcall(function()
        if hook == "paused" then return p:paused({})
        elseif hook == "authenticate" then return p:authenticate({})
        elseif hook == "limits" then return p:limits()
        elseif hook == "cost" then return p:cost({})
        else return p:meter({ { pushed = 1 } }) end
    end)
    assert.is_false(ok, "ephd.testing passed what the broker refuses")
    return err
end

describe("ephd.contract", function()
    for _, case in ipairs({
        { "limits", "{ rate = -1 }" },
        { "limits", "{ rate = 1.5 }" },
        { "limits", "{ rate = 0 / 0 }" },
        { "limits", "{ burts = 10 }" },
        { "limits", "nil" },
        { "cost", "0 / 0" },
        { "cost", "-1" },
        { "cost", "'1'" },
        { "paused", "0" },
        { "paused", "86401" },
        { "paused", "10, 42" },
        { "authenticate", "'teapot'" },
        { "authenticate", "{ tenant = 'x', level = 'admin' }" },
        { "authenticate", "{ tenant = '00000000-0000-0000-0000-"
                          .. "000000000002', level = 'root' }" },
        { "authenticate", "42" },
        { "meter", "'x'" },
        { "meter", "{ { n = {} } }" },
        { "meter", "{ [2] = {} }" },
    }) do
        local hook, result = case[1], case[2]
        it(("fails a spec on what the broker refuses: %s returning %s")
           :format(hook, result), function()
            local dir = policy_dir(hook, result)
            local logged, answer = broker(dir, hook)
            local raised = spec(dir, hook)
            os.execute("rm -rf '" .. dir .. "'")
            assert.equals(logged, raised)
            assert.truthy(raised:find(hook, 1, true), raised)
            if hook ~= "meter" then
                assert.equals(503, answer.status)
                assert.equals("ephemeral_unavailable",
                              cjson.decode(answer.body).code)
            end
        end)
    end

    it("passes in a spec what the broker takes", function()
        local dir = policy_dir("limits", "{ rate = 10, max_bytes = 1 }")
        local p = assert(testing.load(dir))
        assert.same({ rate = 10, max_bytes = 1 }, p:limits())
        os.execute("rm -rf '" .. dir .. "'")
        for _, result in ipairs({ "nil", "'unauthorized', 'no'",
            "{ tenant = '00000000-0000-0000-0000-00000000000A', "
            .. "level = 'read-only' }" }) do
            dir = policy_dir("authenticate", result)
            p = assert(testing.load(dir))
            assert.has_no.errors(function() p:authenticate({}) end)
            os.execute("rm -rf '" .. dir .. "'")
        end
    end)

    it("gives hooks the arguments the broker gives", function()
        assert.same({ route = "push", method = "POST",
                      path = "/api/v1/ephemeral/push", authorization = "",
                      tenant = testing.TENANT }, testing.request())
        assert.same({ tenant = testing.TENANT, queue = "q",
                      partition = "Default", messages = 3, bytes = 0 },
                    testing.push({ messages = 3 }))
    end)
end)
