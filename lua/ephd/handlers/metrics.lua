-- GET /metrics (admin, system): C writes the broker's families; these are
-- the ones only Lua knows (the policy's, and a shadow's: ephd.shadow).
local core = require("ephd.core")
local hooks = require("ephd.hooks")
local policy = require("ephd.policy")
local shadow = require("ephd.shadow")

local C = core.C

local _M = {}

local function policy_families()
    local lines = {
        "# HELP queen_ephemeral_policy_hook_failures_total Policy hook calls "
        .. "that raised, returned garbage or overran their budget.",
        "# TYPE queen_ephemeral_policy_hook_failures_total counter",
    }
    for _, hook in ipairs(policy.HOOKS) do
        lines[#lines + 1] = ('queen_ephemeral_policy_hook_failures_total'
            .. '{hook="%s"} %d'):format(hook, hooks.failures[hook] or 0)
    end
    lines[#lines + 1] = "# HELP queen_ephemeral_policy_reloads_total "
                        .. "Policy reloads, by outcome."
    lines[#lines + 1] = "# TYPE queen_ephemeral_policy_reloads_total counter"
    lines[#lines + 1] = ('queen_ephemeral_policy_reloads_total{outcome="ok"} '
                         .. '%d'):format(hooks.reloads.ok)
    lines[#lines + 1] = ('queen_ephemeral_policy_reloads_total'
                         .. '{outcome="refused"} %d'):format(hooks.reloads.refused)
    -- The policy in force: its version as the value, its name as a label
    -- (one series; a reload to another name replaces it).
    local active = hooks.active
    lines[#lines + 1] = "# HELP queen_ephemeral_policy_version The version "
                        .. "of the policy in force, by name."
    lines[#lines + 1] = "# TYPE queen_ephemeral_policy_version gauge"
    lines[#lines + 1] = ('queen_ephemeral_policy_version{name="%s"} %.17g')
        :format(active.name:gsub('[\\"]', "\\%0"):gsub("\n", "\\n"),
                active.version)
    return table.concat(lines, "\n") .. "\n" .. shadow.metrics()
end

function _M.parse(ctx)
    if ctx.req.query.len > 0 then return "this route takes no parameters" end
end

function _M.commit(ctx)
    local extra = policy_families()
    C.ephd_ffi_metrics(ctx.req, extra, #extra)
    return 0
end

return _M
