-- Maps `Authorization: Bearer <token>` to a tenant and an access level,
-- from tokens.lua. A missing or unknown token is 401; a level too weak for
-- the route is the broker's 403.
local tokens = require("tokens")

return {
    name = "bearer-tokens",
    version = 1,
    hooks = {
        authenticate = function(request)
            local token = request.authorization:match("^Bearer%s+(%S+)%s*$")
            if not token then
                return "unauthorized", "a bearer token is required"
            end
            local who = tokens[token]
            if not who then return "unauthorized", "unknown token" end
            return who
        end,
    },
}
