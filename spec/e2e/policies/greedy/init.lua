-- Memory without bound, for the route "queues": one 1 GiB string at once
-- when asked so, else 16 MiB more kept on each call.
local kept = {}

return {
    name = "greedy",
    version = 1,
    hooks = {
        authenticate = function(request)
            if request.route ~= "queues" then return end
            if request.authorization == "huge" then
                local s = ("x"):rep(2 ^ 30)
                return #s > 0 and nil
            end
            kept[#kept + 1] = ("x"):rep(16 * 2 ^ 20) .. #kept
        end,
    },
}
