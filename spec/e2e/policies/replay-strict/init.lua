-- plan-tiers' plans with a stricter free plan: one message a second, two
-- at once (spec/e2e/replay_spec.lua replays a plan-tiers log against it).
local PRO = {
    ["00000000-0000-0000-0000-000000000001"] = true,
    ["11111111-1111-1111-1111-111111111111"] = true,
}

return {
    name = "replay-strict",
    version = 1,
    hooks = {
        limits = function(tenant)
            if PRO[tenant] then
                return { rate = 1000000, burst = 2000000 }
            end
            return { rate = 1, burst = 2, max_queues = 10, max_parked = 10 }
        end,
    },
}
