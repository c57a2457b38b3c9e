-- tenant -> plan: plan-tiers' without the default tenant, now on free.
return {
    ["11111111-1111-1111-1111-111111111111"] = "pro",
}
