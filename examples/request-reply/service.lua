-- The service side of request/reply: takes requests from the shared
-- `requests` queue and answers each into the inbox the request names.
-- Runs until killed; a broker that goes away is waited for.
local client = require("ephd.client")
local socket = require("socket")

local c = client.new({ url = os.getenv("EPHD_URL") })

while true do
    -- Queue mode: every service instance shares one cursor, so a request
    -- goes to exactly one of them; the lease holds it until the ack.
    local requests, err = c:pop("requests", { wait = true, batch = 50,
                                              timeout = 10000 })
    if not requests then
        io.stderr:write("service: ", tostring(err), "\n")
        socket.sleep(0.5)
    else
        local done = {}
        for _, m in ipairs(requests) do
            local r = m.payload
            c:push(r.inbox, { { id = r.id, answer = r.n * r.n } })
            done[#done + 1] = m.id
        end
        if #done > 0 then c:ack("requests", done) end
    end
end
