-- A member of a cell that is not a broker, for relay_spec's re-hash: it
-- listens on 127.0.0.1:PORT and, for each request, leaves the cell (runs
-- the SQL given, which deletes its row), waits until the brokers have read
-- that, and answers 503 owner_moved, as an owner whose view changed would.
-- A hand-over the brokers send it on its joining is refused at once, so
-- it stays in the cell until a relayed request reaches it. It answers the
-- members' readiness probe as member ID of EPOCH, so they place on it.
-- usage: luajit moved_owner.lua PORT ID EPOCH SQL_COMMAND LIVE URL...
-- (the brokers' URLs, each of which must see LIVE members once it left)
local socket = require("socket")
local http = require("socket.http")
local cjson = require("cjson")

local port, id, epoch = tonumber(arg[1]), arg[2], arg[3]
local leave, live = arg[4], tonumber(arg[5])
local brokers = { select(6, unpack(arg)) }

-- Until every broker's view of the cell counts `live` members, for up to
-- 10 s (the spec then fails on the owner_moved that never comes in time).
local function await_left()
    local deadline = socket.gettime() + 10
    for _, url in ipairs(brokers) do
        repeat
            local body = http.request(url .. "/api/v1/system/cell")
            local ok, view = pcall(cjson.decode, body or "")
            if ok and view.live == live then break end
            socket.sleep(0.05)
        until socket.gettime() > deadline
    end
end

local server = assert(socket.bind("127.0.0.1", port))
io.stdout:write("listening\n")
io.stdout:flush()
local BODY = '{"error":"this broker does not own the partition; retry soon",'
             .. '"code":"owner_moved"}'
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
    if length > 0 then c:receive(length) end
    if target == "/api/v1/ephemeral/ready" then
        local ready = '{"id":"' .. id .. '","epoch":' .. epoch
                      .. ',"ready":true}'
        c:send("HTTP/1.1 200 OK\r\nConnection: close\r\n"
               .. "Content-Type: application/json\r\nContent-Length: "
               .. #ready .. "\r\n\r\n" .. ready)
        c:close()
        goto next
    end
    if target == "/api/v1/ephemeral/handover" then
        local refused = '{"error":"not a broker","code":"ephemeral_unavailable"}'
        c:send("HTTP/1.1 503 Service Unavailable\r\n"
               .. "Content-Type: application/json\r\nContent-Length: "
               .. #refused .. "\r\n\r\n" .. refused)
        c:close()
        goto next
    end
    os.execute(leave)
    await_left()
    c:send("HTTP/1.1 503 Service Unavailable\r\n"
           .. "Content-Type: application/json\r\nRetry-After: 1\r\n"
           .. "Content-Length: " .. #BODY .. "\r\n\r\n" .. BODY)
    c:close()
    ::next::
end
