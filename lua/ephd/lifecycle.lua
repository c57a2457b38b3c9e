-- The policy's lifecycle, as C drives it (core/lua_host.c reads the
-- directories, off the loop for a reload or a shadow): the live policy
-- loaded at boot and reloaded, a candidate loaded as the shadow, and
-- `ephd policy check`'s load with no engine behind it.
local core = require("ephd.core")
local hooks = require("ephd.hooks")
local ladder = require("ephd.ladder")
local limits = require("ephd.limits")
local metering = require("ephd.metering")
local policy = require("ephd.policy")
local router = require("ephd.router")
local shadow = require("ephd.shadow")

local C = core.C

local _M = {}

-- What policy code may read: clocks and a tenant's counters.
local API = {
    now = function() return C.ephd_ffi_wall_time() end,
    counters = metering.of,
}

-- `ephd policy check` has no engine behind it: every tenant is one never
-- seen.
local CHECK_API = {
    now = API.now,
    counters = function() return nil end,
}

-- Loading runs the policy's top level, which is policy code too: a
-- candidate's (a shadow's) within its share of the memory cap, which its
-- hooks keep (p.candidate, until a promotion makes it the live policy).
local function load(dir, files, default_dir, default_files, api, candidate)
    C.ephd_ffi_policy_enter(candidate and 1 or 0)
    local ok, p, err = pcall(policy.load, dir, files, default_dir,
                             default_files, api or API)
    C.ephd_ffi_policy_leave()
    if not ok then return nil, p end
    if not p then return nil, err end
    p.candidate = candidate
    return p
end

-- Returns true, name, version or nil, why.
function _M.init(dir, files, default_dir, default_files)
    for i, r in ipairs(router.ROUTES) do C.ephd_ffi_metrics_route(i, r.name) end
    local p, err = load(dir, files, default_dir, default_files)
    if not p then return nil, err end
    ladder.use(p)
    return true, p.name, p.version
end

-- A new policy replaces the old only if it loads; limits the old one
-- decided are forgotten, rate buckets and counters are kept.
function _M.reload(dir, files, default_dir, default_files)
    local p, err = load(dir, files, default_dir, default_files)
    if not p then
        hooks.reloads.refused = hooks.reloads.refused + 1
        return nil, err
    end
    ladder.use(p)
    hooks.reloads.ok = hooks.reloads.ok + 1
    limits.forget()
    return true, p.name, p.version
end

function _M.check(dir, files, default_dir, default_files)
    local p, err = load(dir, files, default_dir, default_files, CHECK_API)
    if not p then return nil, err end
    return true, p.name, p.version
end

-- A candidate to judge beside the live policy (ephd.shadow), loaded as a
-- reload loads: it replaces the shadow in place only if it loads. It
-- judges from the next request on (ephd.dispatch's observe).
function _M.shadow(dir, files, default_dir, default_files)
    local p, err = load(dir, files, default_dir, default_files, nil, true)
    if not p then return nil, err end
    shadow.start(p, dir)
    return true, p.name, p.version
end

return _M
