-- ephd.testing: the policy authors' kit. Loads a policy directory from disk
-- exactly as the broker does (same sandbox, same fallback to the default
-- policy) and drives its hooks with synthetic requests, from busted and
-- without a daemon:
--
--   local testing = require("ephd.testing")
--   local p = testing.load("examples/policies/plan-tiers")
--   local limits = p:limits("2b1f...", nil)
--   local who, code = p:authenticate({ route = "push",
--                                      authorization = "Bearer x" })
local policy = require("ephd.policy")

local _M = {}

local function here()
    local source = debug.getinfo(1, "S").source
    return source:sub(1, 1) == "@" and source:sub(2):match("^(.*)/[^/]*$")
           or "."
end

-- The default policy: beside this module when installed, in the source
-- tree's policies/default otherwise, or where EPHD_DEFAULT_POLICY says.
function _M.default_dir()
    local env = os.getenv("EPHD_DEFAULT_POLICY")
    if env then return env end
    local dir = here()
    for _, candidate in ipairs({ dir .. "/policies/default",
                                 dir .. "/../../policies/default" }) do
        local f = io.open(candidate .. "/init.lua")
        if f then
            f:close()
            return candidate
        end
    end
    error("ephd.testing: cannot find the default policy; set "
          .. "EPHD_DEFAULT_POLICY")
end

-- The *.lua files of dir, by module name, as the broker reads them.
function _M.read(dir)
    local files = {}
    local p = io.popen("ls -1 '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
    for name in p:lines() do
        local stem = name:match("^([%w_]+)%.lua$")
        if stem then
            local f = assert(io.open(dir .. "/" .. name, "rb"))
            files[stem] = f:read("*a")
            f:close()
        end
    end
    p:close()
    return files
end

local Policy = {}
Policy.__index = Policy

-- opts: now (a function returning wall-clock seconds), counters (a function
-- of a tenant returning its counters), default_dir.
-- dir defaults to $EPHD_POLICY_DIR, which `ephd policy test DIR` sets.
function _M.load(dir, opts)
    dir = dir or os.getenv("EPHD_POLICY_DIR")
    if not dir then error("ephd.testing.load: which directory?", 2) end
    opts = opts or {}
    local default_dir = opts.default_dir or _M.default_dir()
    local api = {
        now = opts.now or os.time,
        counters = opts.counters or function() return nil end,
    }
    local p, err = policy.load(dir, _M.read(dir), default_dir,
                               _M.read(default_dir), api)
    if not p then return nil, err end
    return setmetatable({ policy = p, name = p.name, version = p.version,
                          settings = p.settings }, Policy)
end

-- Calls one hook as the broker would; raises what the hook raises.
function Policy:hook(name, ...)
    local h = self.policy.hooks[name]
    if not h then return nil end
    return h(...)
end

function Policy:paused(request) return self:hook("paused", request) end

-- The request a hook sees; tenant defaults to the default tenant.
function _M.request(t)
    t = t or {}
    return {
        route = t.route or "push",
        method = t.method or "POST",
        path = t.path or "/api/v1/ephemeral/push",
        tenant = t.tenant or "00000000-0000-0000-0000-000000000001",
        authorization = t.authorization or "",
    }
end

function Policy:authenticate(request)
    return self:hook("authenticate", _M.request(request))
end

function Policy:limits(tenant, grant, defaults)
    return self:hook("limits", tenant, grant,
                     defaults or { rate = 5000, burst = 10000,
                                   max_parked = 100000, max_queues = 100000 })
end

function Policy:cost(push)
    return self:hook("cost", push)
end

function Policy:meter(deltas)
    return self:hook("meter", deltas)
end

return _M
