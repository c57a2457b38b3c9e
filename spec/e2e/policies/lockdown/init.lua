-- For specs with tenancy headers on, as a shadow beside the operator
-- policy: `Authorization: Bearer operator` is admin over the header's
-- tenant, and everyone else is refused, so every tenant's request is a
-- disagreement.
return {
    name = "lockdown",
    version = 1,
    hooks = {
        authenticate = function(request)
            if request.authorization == "Bearer operator" then
                return { tenant = request.tenant, level = "admin" }
            end
            return "unauthorized", "locked down"
        end,
    },
}
