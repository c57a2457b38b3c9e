-- Limits by plan: each tenant is on a plan (tenants.lua), each plan sets a
-- message rate, bytes, queues and parked pops. Unknown tenants are on the
-- free plan. A grant row's columns, where set, still win: the operator's
-- database overrides the plan for one tenant (a granted rate is its burst
-- too, as in Queen).
local tenants = require("tenants")

local PLANS = {
    free = { rate = 100, burst = 200, max_bytes = 1048576, max_queues = 10,
             max_parked = 10 },
    pro = { rate = 1000000, burst = 2000000, max_bytes = 268435456,
            max_queues = 100000, max_parked = 100000 },
}

return {
    name = "plan-tiers",
    version = 1,
    hooks = {
        limits = function(tenant, grant)
            local plan = PLANS[tenants[tenant] or "free"]
            local l = {}
            for k, v in pairs(plan) do l[k] = v end
            if grant then
                l.rate = grant.max_msgs_per_sec or l.rate
                l.burst = grant.max_msgs_per_sec or l.burst
                l.max_bytes = grant.max_bytes or l.max_bytes
                l.max_queues = grant.max_queues or l.max_queues
            end
            return l
        end,
    },
}
