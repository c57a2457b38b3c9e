-- The policy pattern matcher (core/patterns.c) answers as LuaJIT's own on
-- a corpus of subjects and patterns, errors included, and stops once the
-- policy code it serves is past its budget, where LuaJIT's runs for
-- seconds.
local ffi = require("ffi")
local helper = require("helper")

package.cpath = helper.build .. "/?.so;" .. package.cpath
local ours = require("ephd_patterns")

local SUBJECTS = {
    "", "a", "hello world", "Bearer abc.def-123  ", "  x  ", "aaa", "abab",
    "key=value; other=2", "f(a(b)c)d", "THE (quick) fox", "1.5e10",
    "a\0b", "\n\t line", "caf\195\169", "^$*+?.([%-", "x%y", "]]][[",
    "00000000-0000-0000-0000-000000000001",
}

local PATTERNS = {
    "", "a", "^a", "a$", "^$", ".", ".-", ".*", "a*", "a+", "a-", "a?b",
    "%a+", "%A+", "%d+", "%s*$", "^%s*(.-)%s*$", "(%w+)=(%w+)", "()a()",
    "[abc]", "[^abc]+", "[a-z]+", "[%a_][%w_]*", "[]]", "[^]]", "[a-]",
    "%b()", "%f[%w]%w+", "%f[%W]", "(a)%1", "((a)(b))", "^Bearer%s+(%S+)%s*$",
    "%x+%-", "^%x%x%x%x%x%x%x%x%-", "[%d%.]+", "%z", "%p", "%c", "%u%l",
    "%g", "a.-b", "(.)(.)", "%%", "%.", "x$y", "^^", "$", "[.]", "[%]]",
    -- malformed
    "%", "[a", "(", ")", "%1", "(()", "%b", "%ba", "%f", "%fa", "[",
    "(%1)",
}

local function outcome(fn, ...)
    local r = { pcall(fn, ...) }
    if not r[1] then return "error" end
    return r
end

local function same(name, builtin, mine, ...)
    local want, got = outcome(builtin, ...), outcome(mine, ...)
    local args = { ... }
    for i = 1, select("#", ...) do args[i] = ("%q"):format(tostring(args[i])) end
    assert.same(want, got, name .. "(" .. table.concat(args, ", ") .. ")")
end

local function gmatch_all(gmatch)
    return function(s, p)
        local out = {}
        for a, b, c in gmatch(s, p) do out[#out + 1] = { a, b, c } end
        return out
    end
end

describe("policy patterns", function()
    it("find and match answer as LuaJIT's", function()
        for _, s in ipairs(SUBJECTS) do
            for _, p in ipairs(PATTERNS) do
                same("find", string.find, ours.find, s, p)
                same("match", string.match, ours.match, s, p)
                for _, init in ipairs({ 2, -2, 0, #s + 1, #s + 2, 100 }) do
                    same("find", string.find, ours.find, s, p, init)
                    same("match", string.match, ours.match, s, p, init)
                end
                same("find", string.find, ours.find, s, p, 1, true)
            end
        end
    end)

    it("gmatch answers as LuaJIT's", function()
        for _, s in ipairs(SUBJECTS) do
            for _, p in ipairs(PATTERNS) do
                same("gmatch", gmatch_all(string.gmatch),
                     gmatch_all(ours.gmatch), s, p)
            end
        end
    end)

    it("gsub answers as LuaJIT's, with every kind of replacement",
       function()
        local repls = {
            "<%0>", "%1-%2", "%%", "x", "%", "%a", 7,
            { a = "A", hello = false, x = 1 },
            function(a, b) return b and (a .. b) or nil end,
            function() return false end,
            function() return {} end,
        }
        for _, s in ipairs(SUBJECTS) do
            for _, p in ipairs(PATTERNS) do
                for _, r in ipairs(repls) do
                    same("gsub", string.gsub, ours.gsub, s, p, r)
                end
                same("gsub", string.gsub, ours.gsub, s, p, "-", 1)
                same("gsub", string.gsub, ours.gsub, s, p, "-", 0)
            end
        end
    end)

    it("stops a pathological pattern once the budget is spent", function()
        local lib = ffi.load(helper.build .. "/ephd_patterns.so")
        ffi.cdef("void ephd_ffi_policy_enter(int); void ephd_ffi_policy_leave(void);")
        local subject = ("a"):rep(40)
        local pattern = ("a*"):rep(12) .. "b"
        -- No watchdog started: the budget is 0 and spent at once.
        lib.ephd_ffi_policy_enter(0)
        local t0 = os.clock()
        local ok, err = pcall(ours.find, subject, pattern)
        lib.ephd_ffi_policy_leave()
        assert.is_false(ok)
        assert.truthy(err:find("time budget", 1, true))
        assert.is_true(os.clock() - t0 < 0.1, os.clock() - t0 .. " s")
        -- Outside policy code it is an ordinary matcher.
        assert.same({ 1, 3 }, { ours.find("aab", "a*b") })
    end)
end)
