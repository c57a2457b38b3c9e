-- A member of a cell that is not a broker, for cell_owner_spec: it
-- listens on 127.0.0.1:PORT, answers the members' readiness probe as
-- member ID of EPOCH while the file READY exists (closing the connection
-- otherwise), refuses hand-overs, and answers every other request 503
-- owner_moved naming, in X-Queen-Owner, the member whose id the file HINT
-- holds, as a broker whose view gives the partition to that member does.
-- Each such request's target and body are appended to the file SEEN.
-- usage: luajit hinting_owner.lua PORT ID EPOCH READY HINT SEEN
local socket = require("socket")

local port, id, epoch = tonumber(arg[1]), arg[2], arg[3]
local ready_file, hint_file, seen_file = arg[4], arg[5], arg[6]

local function read_file(path)
    local f = io.open(path)
    if not f then return nil end
    local s = f:read("*a")
    f:close()
    return s
end

local function answer(c, status, body, extra)
    c:send("HTTP/1.1 " .. status .. "\r\nConnection: close\r\n"
           .. "Content-Type: application/json\r\n" .. (extra or "")
           .. "Content-Length: " .. #body .. "\r\n\r\n" .. body)
end

local server = assert(socket.bind("127.0.0.1", port))
while true do
    local c = server:accept()
    c:settimeout(5)
    local target = (c:receive("*l") or ""):match("^%u+ (%S+)")
    local length = 0
    while true do
        local line = c:receive("*l")
        if not line or line == "" then break end
        local n = line:lower():match("^content%-length:%s*(%d+)")
        if n then length = tonumber(n) end
    end
    local body = length > 0 and c:receive(length) or ""
    if target == "/api/v1/ephemeral/ready" then
        if read_file(ready_file) then
            answer(c, "200 OK", '{"id":"' .. id .. '","epoch":' .. epoch
                                .. ',"ready":true}')
        end
    elseif target == "/api/v1/ephemeral/handover" then
        answer(c, "503 Service Unavailable",
               '{"error":"not a broker","code":"ephemeral_unavailable"}')
    elseif target == "/api/v1/ephemeral/leaving" then
        answer(c, "200 OK", '{"id":"' .. id .. '","leaving":true}')
    elseif target then
        local f = io.open(seen_file, "a")
        f:write(target, " ", body, "\n")
        f:close()
        answer(c, "503 Service Unavailable",
               '{"error":"this broker does not own the partition; retry soon",'
               .. '"code":"owner_moved"}',
               "Retry-After: 1\r\nX-Queen-Owner: "
               .. (read_file(hint_file) or "") .. "\r\n")
    end
    c:close()
end
