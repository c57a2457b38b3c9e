-- A member of a cell that is not a broker and never answers: it listens
-- on 127.0.0.1:PORT, answers the members' readiness probe as member ID of
-- EPOCH (so they place partitions on it), and holds every other request
-- it is sent (a hand-over, a relayed request) unanswered, its connection
-- open, until it is killed: a peer that accepts and never answers.
-- usage: luajit silent_member.lua PORT ID EPOCH
local socket = require("socket")

local port, id, epoch = tonumber(arg[1]), arg[2], arg[3]
local READY = '{"id":"' .. id .. '","epoch":' .. epoch .. ',"ready":true}'

local server = assert(socket.bind("127.0.0.1", port))
server:settimeout(0)
local clients = {} -- socket -> what it sent so far
io.stdout:write("listening\n")
io.stdout:flush()

while true do
    local watch = { server }
    for c in pairs(clients) do watch[#watch + 1] = c end
    local readable = socket.select(watch, nil, 1)
    for _, s in ipairs(readable) do
        if s == server then
            local c = server:accept()
            if c then
                c:settimeout(0)
                clients[c] = ""
            end
        else
            local data, err, partial = s:receive(65536)
            data = data or partial
            if err == "closed" then
                clients[s] = nil
                s:close()
            elseif data and #data > 0 then
                -- Only the probe is looked at, by its request line; the
                -- rest is read and dropped so no sender blocks writing.
                local seen = clients[s]
                if #seen < 256 then seen = seen .. data end
                clients[s] = seen
                if seen:find("^GET /api/v1/ephemeral/ready[ ?]")
                   and seen:find("\r\n\r\n", 1, true) then
                    s:send("HTTP/1.1 200 OK\r\nConnection: close\r\n"
                           .. "Content-Type: application/json\r\n"
                           .. "Content-Length: " .. #READY .. "\r\n\r\n"
                           .. READY)
                    clients[s] = nil
                    s:close()
                end
            end
        end
    end
end
