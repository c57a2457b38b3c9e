-- A candidate whose cost hook raises from its fourth call on: as a shadow
-- it judges three pushes, then disables itself (spec/e2e/shadow_spec.lua).
local calls = 0

return {
    name = "breaks-mid-traffic",
    version = 1,
    hooks = {
        cost = function(push)
            calls = calls + 1
            if calls > 3 then error("the candidate broke") end
            return push.messages
        end,
    },
}
