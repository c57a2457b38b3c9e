-- Policy directories: <dir>/init.lua returns {name, version, hooks}.
-- Files arrive in memory (C reads them off the loop),
-- compile in a sandbox without io, os, ffi or debug, and may require each
-- other by name. A hook the operator's policy does not define is taken from
-- policies/default. Loading is all or nothing: the caller swaps the result
-- in only if this returns one.
local jit = require("jit")
local contract = require("ephd.contract")

local _M = {}

-- The hook API, versioned for policy authors (docs/policy.md).
_M.API_VERSION = 1

_M.HOOKS = contract.HOOKS
local KNOWN = {}
for _, h in ipairs(_M.HOOKS) do KNOWN[h] = true end

local SAFE = {
    "assert", "error", "ipairs", "next", "pairs", "pcall", "select",
    "tonumber", "tostring", "type", "unpack", "xpcall",
}
local SAFE_LIBS = { "string", "table", "math", "bit" }
-- What init.lua returns, and nothing else: a misspelt field is refused
-- rather than ignored.
local FIELDS = { name = true, version = true, hooks = true }

local function copy(t)
    local c = {}
    for k, v in pairs(t) do c[k] = v end
    return c
end

-- table.sort is C that no debug hook reaches and superlinear: sorting the
-- 30 million numbers that fit under the memory cap takes seconds. Policy
-- code sorts at most this many items (a few milliseconds); the other C
-- functions it can reach take time linear in the memory they make, which
-- the cap bounds (docs/policy.md).
_M.MAX_SORT = 100000

local sort = table.sort

local function bounded_sort(t, cmp)
    if type(t) == "table" and #t > _M.MAX_SORT then
        error("table.sort: more than " .. _M.MAX_SORT
              .. " items in policy code", 2)
    end
    return sort(t, cmp)
end

-- xpcall runs its message handler before unwinding, inside the debug hook
-- that raised the budget's error: no hook fires there, so a handler that
-- loops would hold the loop for good. Policy code gets an xpcall whose
-- handler runs after pcall has unwound, as ordinary policy code, which
-- the budget reaches; only the traceback a handler could take differs.
local function settle(handler, ok, ...)
    if ok then return true, ... end
    return false, handler((...))
end

local function unwound_xpcall(f, handler, ...)
    return settle(handler, pcall(f, ...))
end

local function sandbox(dir, files, api, interpreted)
    local env = {}
    for _, name in ipairs(SAFE) do env[name] = _G[name] end
    for _, name in ipairs(SAFE_LIBS) do env[name] = copy(require(name)) end
    env.table.sort = bounded_sort
    env.xpcall = unwound_xpcall
    env.ephd = copy(api or {})
    env.ephd.api_version = _M.API_VERSION
    local loaded = {}
    env.require = function(mod)
        if loaded[mod] ~= nil then return loaded[mod] end
        if type(mod) ~= "string" or not mod:find("^[%w_]+$")
                or not files[mod] then
            error("policy require: " .. tostring(mod) .. " is not a file of "
                  .. dir, 2)
        end
        local chunk, err = loadstring(files[mod], "@" .. dir .. "/" .. mod
                                                  .. ".lua")
        if not chunk then error(err, 2) end
        -- An operator's code runs interpreted, with everything it defines:
        -- only then does a debug hook (the watchdog's interrupt) reach a
        -- hook that never returns. The broker's own default stays compiled.
        if interpreted then jit.off(chunk, true) end
        setfenv(chunk, env)
        local value = chunk()
        loaded[mod] = value == nil and true or value
        return loaded[mod]
    end
    return env
end

-- Compiles one directory; returns its policy table or nil and why.
function _M.compile(dir, files, api, interpreted)
    if type(files) ~= "table" or not files.init then
        return nil, dir .. "/init.lua is missing"
    end
    local env = sandbox(dir, files, api, interpreted)
    local ok, p = pcall(env.require, "init")
    if not ok then return nil, tostring(p) end
    if type(p) ~= "table" or type(p.name) ~= "string"
            or type(p.version) ~= "number" or type(p.hooks) ~= "table" then
        return nil, dir .. "/init.lua must return {name, version, hooks}"
    end
    for k in pairs(p) do
        if not FIELDS[k] then
            return nil, dir .. "/init.lua returns a field " .. tostring(k)
                        .. " besides name, version and hooks"
        end
    end
    for name, hook in pairs(p.hooks) do
        if not KNOWN[name] then
            return nil, "unknown hook " .. tostring(name) .. " (hooks: "
                        .. table.concat(_M.HOOKS, ", ") .. ")"
        end
        if type(hook) ~= "function" then
            return nil, "hook " .. name .. " is not a function"
        end
    end
    return p
end

-- The operator's policy over the default one. Returns {name, version,
-- hooks, guarded, messages_cost}: guarded names the hooks that are the
-- operator's (interpreted, and watched by the time budget); the others
-- are the broker's shipped default. messages_cost is true while the cost
-- in force is the default's, which is the push's message count: the
-- broker takes that count without calling the hook or building its push
-- table (spec/ephd/policy_spec.lua pins the default to it). reads_names
-- is true when a hook reads a push's queue and partition (a cost of the
-- operator's, or admit): the push's parse reads them out of C's scan
-- only then. Or nil and why.
function _M.load(dir, files, default_dir, default_files, api)
    local fallback, err = _M.compile(default_dir, default_files, api, false)
    if not fallback then return nil, "the default policy: " .. err end
    local p = fallback
    if dir ~= default_dir then
        p, err = _M.compile(dir, files, api, true)
        if not p then return nil, err end
    end
    local hooks, guarded = {}, {}
    for _, name in ipairs(_M.HOOKS) do
        hooks[name] = p.hooks[name] or fallback.hooks[name]
        guarded[name] = p ~= fallback and p.hooks[name] ~= nil
    end
    return { name = p.name, version = p.version, hooks = hooks,
             guarded = guarded, messages_cost = not guarded.cost,
             reads_names = guarded.cost or hooks.admit ~= nil, dir = dir }
end

return _M
