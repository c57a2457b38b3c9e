-- The operator's policy directory: <dir>/init.lua returns a table
-- {name, version, hooks = {...}}. It runs in a sandbox without io, os, ffi
-- or debug, and may require its own files from the same directory.
local _M = {}

local SAFE = {
    "assert", "error", "ipairs", "next", "pairs", "pcall", "select",
    "tonumber", "tostring", "type", "unpack", "xpcall",
}
local SAFE_LIBS = { "string", "table", "math", "bit" }

local HOOKS = { authenticate = true }

local function readonly_copy(t)
    local copy = {}
    for k, v in pairs(t) do copy[k] = v end
    return copy
end

local function sandbox(dir)
    local env = {}
    for _, name in ipairs(SAFE) do env[name] = _G[name] end
    for _, name in ipairs(SAFE_LIBS) do
        env[name] = readonly_copy(require(name))
    end
    local loaded = {}
    env.require = function(mod)
        if loaded[mod] ~= nil then return loaded[mod] end
        if not mod:find("^[%w_]+$") then
            error("policy require: " .. mod .. " is not a file of "
                  .. "the policy directory", 2)
        end
        local chunk, err = loadfile(dir .. "/" .. mod .. ".lua")
        if not chunk then error(err, 2) end
        setfenv(chunk, env)
        local value = chunk()
        loaded[mod] = value == nil and true or value
        return loaded[mod]
    end
    return env
end

-- Loads and checks a directory; returns the policy or nil and why.
function _M.load(dir)
    local chunk, err = loadfile(dir .. "/init.lua")
    if not chunk then return nil, err end
    setfenv(chunk, sandbox(dir))
    local ok, policy = pcall(chunk)
    if not ok then return nil, policy end
    if type(policy) ~= "table" or type(policy.name) ~= "string"
            or type(policy.version) ~= "number"
            or type(policy.hooks) ~= "table" then
        return nil, dir .. "/init.lua must return {name, version, hooks}"
    end
    for name, hook in pairs(policy.hooks) do
        if not HOOKS[name] then
            return nil, "unknown hook " .. tostring(name)
        end
        if type(hook) ~= "function" then
            return nil, "hook " .. name .. " is not a function"
        end
    end
    return policy
end

return _M
