-- plan-tiers made stricter, the candidate of spec/e2e/shadow_spec.lua and
-- of docs/policy.md's "Changing policy safely": the same plans, but the
-- default tenant (a self-hosted broker's) moves from pro to free, and the
-- free plan pushes 5 messages a second instead of 100.
local tenants = require("tenants")

local PLANS = {
    free = { rate = 5, burst = 5, max_bytes = 1048576, max_queues = 10,
             max_parked = 10 },
    pro = { rate = 1000000, burst = 2000000, max_bytes = 268435456,
            max_queues = 100000, max_parked = 100000 },
}

return {
    name = "plan-tiers-strict",
    version = 2,
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
