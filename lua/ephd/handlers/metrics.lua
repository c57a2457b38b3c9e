-- GET /metrics (admin, system): C writes the page, its families and those
-- only Lua counts (the policy's and a shadow's), from the numbers and label
-- values handed here: the names, HELP texts and format are C's alone
-- (core/metrics.c, core/prom.c).
local ffi = require("ffi")
local core = require("ephd.core")
local hooks = require("ephd.hooks")
local policy = require("ephd.policy")
local shadow = require("ephd.shadow")
local validate = require("ephd.validate")

local C = core.C

local _M = {}

-- The samples, each { family, value, label values... }, in the order C
-- writes each family's.
local function samples()
    local out = {}
    local function add(family, value, a, b)
        out[#out + 1] = { family, value, a, b }
    end
    for _, hook in ipairs(policy.HOOKS) do
        add(C.EPHD_METRIC_HOOK_FAILURES, hooks.failures[hook] or 0, hook)
    end
    add(C.EPHD_METRIC_POLICY_RELOADS, hooks.reloads.ok, "ok")
    add(C.EPHD_METRIC_POLICY_RELOADS, hooks.reloads.refused, "refused")
    add(C.EPHD_METRIC_POLICY_VERSION, hooks.active.version,
        hooks.active.name)
    for _, p in ipairs(shadow.decisions()) do
        add(C.EPHD_METRIC_SHADOW_DECISIONS, p.count, p.live, p.shadow)
    end
    add(C.EPHD_METRIC_SHADOW_DISABLED, shadow.disabled_total)
    return out
end

local function slice(s, text)
    if text then s.ptr, s.len = text, #text end
end

_M.parse = validate.no_query

-- The label values point into the Lua strings of `list`, alive until C
-- has written the page.
function _M.commit(ctx)
    local list = samples()
    local n = #list
    local arr = ffi.new("ephd_metric_t[?]", n)
    for i, s in ipairs(list) do
        local m = arr[i - 1]
        m.family, m.value = s[1], s[2]
        slice(m.label[0], s[3])
        slice(m.label[1], s[4])
    end
    C.ephd_ffi_metrics(ctx.req, arr, n)
    return 0
end

return _M
