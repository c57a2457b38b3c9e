-- A candidate far stricter than plan-tiers: every tenant, the default one
-- included, one message a second and two at once. Loaded as a shadow
-- beside plan-tiers (spec/dashboard/dashboard_spec.mjs), its third push in
-- a second is a disagreement.
return {
    name = "shadow-tight",
    version = 1,
    hooks = {
        limits = function()
            return { rate = 1, burst = 2 }
        end,
    },
}
