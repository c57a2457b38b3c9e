-- A candidate whose cost hook never returns from its second call on, and
-- swallows the interrupt while it can: the budget stops it.
local calls = 0

return {
    name = "loops-mid-traffic",
    version = 1,
    hooks = {
        cost = function(push)
            calls = calls + 1
            if calls > 1 then
                while true do pcall(function() while true do end end) end
            end
            return push.messages
        end,
    },
}
