-- For specs with tenancy headers on: `Authorization: Bearer operator` is
-- admin over the header's tenant; anything else is the header's identity
-- at the broker's default level (read-write).
return {
    name = "operator",
    version = 1,
    hooks = {
        authenticate = function(request)
            if request.authorization == "Bearer operator" then
                return { tenant = request.tenant, level = "admin" }
            end
        end,
    },
}
