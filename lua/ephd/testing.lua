-- ephd.testing: the policy authors' kit. Loads a policy directory from disk
-- exactly as the broker does (same sandbox, same fallback to the default
-- policy) and drives its hooks with the arguments the broker gives them,
-- from busted and without a daemon. A result the broker would refuse
-- (answering 503 and logging policy_hook_failed) raises here with the
-- message the broker logs (ephd.contract):
--
--   local testing = require("ephd.testing")
--   local p = testing.load("examples/policies/plan-tiers")
--   local limits = p:limits("2b1f...", nil)
--   local who, code = p:authenticate({ route = "push",
--                                      authorization = "Bearer x" })
local contract = require("ephd.contract")
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
    return setmetatable({ policy = p, name = p.name, version = p.version },
                        Policy)
end

local function checked(name, ...)
    local bad = contract.check[name](...)
    if bad then error(bad, 0) end
    return ...
end

-- Calls one hook as the broker would; raises what the hook raises, and
-- what the broker would refuse of its results, as the broker logs it.
function Policy:hook(name, ...)
    local h = self.policy.hooks[name]
    if not h then return nil end
    return checked(name, h(...))
end

_M.TENANT = "00000000-0000-0000-0000-000000000001"

-- The request paused and authenticate see; fields left out are a push of
-- the default tenant without credentials.
function _M.request(t)
    t = t or {}
    return contract.request(t.route or "push", t.method or "POST",
                            t.path or "/api/v1/ephemeral/push",
                            t.authorization or "", t.tenant or _M.TENANT)
end

-- The push cost sees; fields left out are one empty message to queue "q".
function _M.push(t)
    t = t or {}
    return contract.push(t.tenant or _M.TENANT, t.queue or "q",
                         t.partition or "Default", t.messages or 1,
                         t.bytes or 0)
end

-- The request admit sees; fields left out are a push of one empty
-- message to queue "q" by the default tenant at read-write. A route other
-- than push carries no counts, as the broker's.
function _M.admission(t)
    t = t or {}
    local route = t.route or "push"
    local push = route == "push"
    return contract.admission(route, t.tenant or _M.TENANT,
                              t.level or "read-write", t.queue or "q",
                              t.partition or (push and "Default" or nil),
                              t.group, push and (t.messages or 1) or nil,
                              push and (t.bytes or 0) or nil)
end

-- The knobs limits gets, the broker's defaults where left out.
function _M.defaults(t)
    t = t or {}
    return contract.defaults(t.rate or 5000, t.burst or 10000,
                             t.max_parked or 100000, t.max_queues or 100000)
end

-- A grant row as limits gets it (enabled unless it says false).
function _M.grant(t)
    return contract.grant(t.enabled ~= false, t.max_bytes, t.max_queues,
                          t.max_msgs_per_sec)
end

function Policy:paused(request)
    local r = _M.request(request)
    r.tenant = nil -- paused comes before identity
    return self:hook("paused", r)
end

function Policy:authenticate(request)
    return self:hook("authenticate", _M.request(request))
end

function Policy:limits(tenant, grant, defaults)
    return self:hook("limits", tenant or _M.TENANT, grant and _M.grant(grant),
                     _M.defaults(defaults))
end

-- Nothing when admitted, else code, message (and Retry-After seconds).
function Policy:admit(request)
    return self:hook("admit", _M.admission(request))
end

-- The options the hook gives a new implicit queue (nil: the broker's
-- defaults), raising on any the broker would not take, as configure
-- would refuse them.
function Policy:queue_options(tenant, queue)
    return self:hook("queue_options", tenant or _M.TENANT, queue or "q")
end

function Policy:cost(push)
    return self:hook("cost", _M.push(push))
end

-- deltas: {tenant, pushed, delivered, parked, bytes, queues} each, zeros
-- where left out.
function Policy:meter(deltas)
    local list = {}
    for i, d in ipairs(deltas or {}) do
        list[i] = contract.delta(d.tenant or _M.TENANT, d.pushed or 0,
                                 d.delivered or 0, d.parked or 0,
                                 d.bytes or 0, d.queues or 0)
    end
    return self:hook("meter", list)
end

return _M
