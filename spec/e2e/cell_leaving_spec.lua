-- A stopping broker tells every member whose row is live that it leaves,
-- not only those its view holds: one that joined a moment ago is in no
-- view until it answers a probe, while its own view already holds the
-- leaver, and untold it relayed the leaver's partitions to a closed
-- listener (ephemeral_forward_failed) for the whole hand-over (a rolling
-- restart without a pause: thousands of 503s per restart).
local daemon = require("e2e.daemon")
local socket = require("socket")

local TOKEN = "cell-leaving-spec-token-0123456789abc"

-- Reads one request on c: its request line, or nil.
local function read_request(c)
    c:settimeout(2)
    local line = c:receive("*l")
    if not line then return nil end
    local len = 0
    repeat
        local h = c:receive("*l")
        local v = h and h:match("^[Cc]ontent%-[Ll]ength:%s*(%d+)")
        if v then len = tonumber(v) end
    until not h or h == ""
    if len > 0 then c:receive(len) end
    return line
end

-- Stops d while playing the member behind fake: answers its leaving
-- notice (as leaving too, so nothing is handed to it) and says whether
-- one came; probes are answered with a closed connection.
local function stop_told(d, fake, id)
    os.execute("kill -TERM " .. d.pid)
    local told
    fake:settimeout(0.05)
    daemon.wait_until("the broker to exit", function()
        local c = fake:accept()
        if c then
            local line = read_request(c)
            if line and line:find("^POST /api/v1/ephemeral/leaving ") then
                told = true
                local body = '{"id":"' .. id .. '","leaving":true}'
                c:send("HTTP/1.1 200 OK\r\nContent-Type: application/json"
                       .. "\r\nContent-Length: " .. #body
                       .. "\r\nConnection: close\r\n\r\n" .. body)
            end
            c:close()
        end
        return not d:alive()
    end)
    return told
end

describe("a stopping broker", function()
    it("tells a member whose row is live and that is not ready yet",
       function()
        local fake = assert(socket.bind("127.0.0.1", 0))
        local _, port = fake:getsockname()
        local id = "f0000000000000c1"
        local d = daemon.start({ db = true, env = {
            QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
            QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400" } })
        finally(function()
            d:stop()
            fake:close()
            daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                       .. id .. "'")
        end)
        -- A member that has written its row and does not answer probes
        -- as itself yet (a broker just started): listed, not in the view.
        daemon.member_row(TOKEN, id, "http://127.0.0.1:" .. port, 9, 600000)
        daemon.wait_until("the row read", function()
            for _, m in ipairs(d:cell().members) do
                if m.id == id then return not m.live end
            end
        end)
        local told = stop_told(d, fake, id)
        assert.is_true(told, "the member was not told")
    end)

    it("tells a member whose row was written since its last read",
       function()
        local fake = assert(socket.bind("127.0.0.1", 0))
        local _, port = fake:getsockname()
        local id = "f0000000000000c2"
        -- Beating once a second: the row below is written, and the stop
        -- begun, between two of its reads (but for a beat landing in
        -- those few milliseconds).
        local d = daemon.start({ db = true, env = {
            QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
            QUEEN_EPHEMERAL_MEMBER_TTL_MS = "4000" } })
        finally(function()
            d:stop()
            fake:close()
            daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                       .. id .. "'")
        end)
        daemon.wait_until("the first read", function()
            return d:cell().fresh
        end)
        daemon.member_row(TOKEN, id, "http://127.0.0.1:" .. port, 9, 600000)
        assert.is_true(stop_told(d, fake, id), "the member was not told")
    end)
end)
