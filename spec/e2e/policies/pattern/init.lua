-- A pattern that backtracks for seconds (LuaJIT's matcher: 6.7 s), in the
-- sandbox's string table and as a string method, for the route "queues".
local SUBJECT = ("a"):rep(25)
local PATTERN = ("a*"):rep(10) .. "b"

return {
    name = "pattern",
    version = 1,
    hooks = {
        authenticate = function(request)
            if request.route ~= "queues" then return end
            if request.authorization == "method" then
                return SUBJECT:find(PATTERN) and "forbidden" or nil
            end
            local ok = pcall(string.gsub, SUBJECT, PATTERN, "x")
            while not ok do ok = pcall(string.match, SUBJECT, PATTERN) end
        end,
    },
}
