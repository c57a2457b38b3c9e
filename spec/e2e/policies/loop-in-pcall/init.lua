-- A hook that catches every error, the watchdog's interrupt included, and
-- carries on: for the route "queues" it never returns by itself. With
-- `Authorization: xpcall` it loops in xpcall's message handler as well,
-- which runs where no debug hook fires unless the sandbox moves it.
local function spin()
    while true do end
end

return {
    name = "loop-in-pcall",
    version = 1,
    hooks = {
        authenticate = function(request)
            if request.route ~= "queues" then return end
            if request.authorization == "xpcall" then
                xpcall(spin, spin)
            end
            while true do
                pcall(spin)
                pcall(error, "again")
            end
        end,
    },
}
