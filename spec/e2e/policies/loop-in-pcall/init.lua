-- A hook that catches every error, the watchdog's interrupt included, and
-- carries on: for the route "queues" it never returns by itself.
local function spin()
    while true do end
end

return {
    name = "loop-in-pcall",
    version = 1,
    hooks = {
        authenticate = function(request)
            if request.route ~= "queues" then return end
            while true do
                pcall(spin)
                pcall(error, "again")
            end
        end,
    },
}
