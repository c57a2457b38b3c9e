local helper = require("helper")
local policy = require("ephd.policy")
local testing = require("ephd.testing")

local DEFAULT = helper.root .. "/policies/default"

local function load(files)
    return policy.load("/p", files, DEFAULT, testing.read(DEFAULT), {})
end

describe("ephd.policy", function()
    -- A hook nobody defines is never called, and the broker builds
    -- nothing for it: the default leaves out the ones that would return
    -- nothing.
    it("loads the default policy with limits and cost alone", function()
        local p = assert(load(testing.read(DEFAULT)))
        assert.equals("default", p.name)
        for _, h in ipairs({ "limits", "cost" }) do
            assert.is_function(p.hooks[h], h)
        end
        for _, h in ipairs({ "paused", "authenticate", "meter" }) do
            assert.is_nil(p.hooks[h], h)
        end
    end)

    -- The broker takes the default's cost without calling it: it must be
    -- the push's message count, whatever else the push holds.
    it("knows the default's cost is the message count", function()
        local files = testing.read(DEFAULT)
        local p = assert(policy.load(DEFAULT, files, DEFAULT, files, {}))
        assert.is_true(p.messages_cost)
        -- A copy of the default elsewhere is the operator's code: called.
        assert.is_false(assert(load(files)).messages_cost)
        for _, n in ipairs({ 0, 1, 7, 10000 }) do
            assert.equals(n, p.hooks.cost(testing.push({ messages = n,
                                                         bytes = 3 * n })))
        end
        -- A policy without a cost hook keeps the default's; one with its
        -- own is called.
        assert.is_true(assert(load({ init = 'return { name = "n", '
            .. 'version = 1, hooks = {} }' })).messages_cost)
        assert.is_false(assert(load({ init = 'return { name = "c", '
            .. 'version = 1, hooks = { cost = function(p) '
            .. 'return p.messages end } }' })).messages_cost)
    end)

    -- A push's names are read out of C's scan only for a hook that sees
    -- them: an operator's cost, or admit.
    it("knows when a hook reads a push's names", function()
        local files = testing.read(DEFAULT)
        assert.is_false(assert(policy.load(DEFAULT, files, DEFAULT, files,
                                           {})).reads_names)
        for hook, reads in pairs({ cost = true, admit = true,
                                   limits = false, queue_options = false }) do
            assert.equals(reads, assert(load({ init = 'return { name = "r", '
                .. 'version = 1, hooks = { ' .. hook .. ' = function() '
                .. 'end } }' })).reads_names, hook)
        end
    end)

    it("sorts at most MAX_SORT items in policy code", function()
        local p = assert(load({ init = 'return { name = "s", version = 1, '
            .. 'hooks = { cost = function(push) local t = {} '
            .. 'for i = push.messages, 1, -1 do t[#t + 1] = i end '
            .. 'table.sort(t) return t[1] end } }' }))
        assert.equals(1, p.hooks.cost({ messages = policy.MAX_SORT }))
        local ok, err = pcall(p.hooks.cost, { messages = policy.MAX_SORT + 1 })
        assert.is_false(ok)
        assert.truthy(err:find("table.sort: more than", 1, true))
        -- The broker's own table.sort is untouched.
        assert.is_nil(table.sort({}))
    end)

    it("takes hooks a policy lacks from the default", function()
        local p = assert(load({ init = 'return { name = "x", version = 2, '
            .. 'hooks = { cost = function(p) return 2 * p.messages end } }' }))
        assert.equals("x", p.name)
        assert.equals(6, p.hooks.cost({ messages = 3 }))
        assert.equals(10, p.hooks.limits("t", nil, { rate = 10 }).rate)
        -- Only the operator's hooks are watched; the default's are ours.
        assert.is_true(p.guarded.cost)
        assert.is_false(p.guarded.limits)
    end)

    it("compiles the operator's code with the JIT off, the broker's on",
       function()
        -- A hook with a hot loop: compiled code starts a trace in it,
        -- interpreted code never does.
        local files = { init = 'return { name = "x", version = 1, hooks = { '
            .. 'cost = function(p) local s = 0 for i = 1, 500 do s = s + i '
            .. 'end return s end } }' }
        local function traces(p)
            local n = 0
            local function on(what, _, func)
                local src = require("jit.util").funcinfo(func).source
                if what == "start" and src == "@/p/init.lua" then n = n + 1 end
            end
            jit.flush()
            jit.attach(on, "trace")
            for _ = 1, 200 do p.hooks.cost({}) end
            jit.attach(on)
            return n
        end
        assert.equals(0, traces(assert(load(files))))
        assert.is_true(traces(assert(policy.compile("/p", files, {}, false)))
                       > 0)
    end)

    it("lets a policy require its own files", function()
        local p = assert(load({
            init = 'local t = require("tokens") return { name = "x", '
                   .. 'version = 1, hooks = { authenticate = function() '
                   .. 'return t.code end } }',
            tokens = 'return { code = "feature_gated" }',
        }))
        assert.equals("feature_gated", p.hooks.authenticate())
    end)

    it("runs policy code without io, os, ffi, debug or load", function()
        for _, lib in ipairs({ "io.open", "os.time", "debug.getinfo",
                               "require('ffi').C", "loadstring('x')",
                               "dofile('/etc/passwd')" }) do
            local p, err = load({ init = "local x = " .. lib .. " return {}" })
            assert.is_nil(p, lib)
            assert.is_string(err)
        end
    end)

    it("gives policy code the ephd API", function()
        local p = assert(policy.load("/p", { init = 'return { name = "x", '
            .. 'version = 1, hooks = { paused = function() '
            .. 'return ephd.now() end } }' }, DEFAULT, testing.read(DEFAULT),
            { now = function() return 42 end }))
        assert.equals(42, p.hooks.paused())
    end)

    it("refuses a directory whose init.lua is missing or wrong", function()
        for _, files in ipairs({
            {},
            { init = "return 1" },
            { init = "error('boom')" },
            { init = "this is not lua" },
            { init = 'return { name = "x", version = 1, hooks = { '
                     .. 'nohook = function() end } }' },
            { init = 'return { name = "x", version = 1, hooks = { '
                     .. 'authenticate = 5 } }' },
        }) do
            local p, err = load(files)
            assert.is_nil(p)
            assert.is_string(err)
        end
    end)

    -- A policy's constants are its code's (there is no settings table): a
    -- field init.lua returns besides these is a mistake, refused.
    it("refuses fields of init.lua besides name, version and hooks",
       function()
        local base = 'return { name = "n", version = 1, hooks = {}, '
        local p, err = load({ init = base .. 'settings = { n = 1 } }' })
        assert.is_nil(p)
        assert.truthy(err:find("returns a field settings besides name, "
                               .. "version and hooks", 1, true), err)
        assert.is_nil((load({ init = base .. 'hook = {} }' })))
    end)

    it("refuses requires outside the directory", function()
        assert.is_nil((load({ init = 'require("../../etc/passwd") return {}' })))
        assert.is_nil((load({ init = 'require("missing") return {}' })))
    end)
end)
