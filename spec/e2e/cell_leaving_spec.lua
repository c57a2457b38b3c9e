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

local function answer(c, body)
    c:send("HTTP/1.1 200 OK\r\nContent-Type: application/json"
           .. "\r\nContent-Length: " .. #body
           .. "\r\nConnection: close\r\n\r\n" .. body)
end

-- Stops d while playing the member behind fake: answers its leaving
-- notice (as leaving too, so nothing is handed to it, unless staying)
-- and says whether one came, and how many hand-overs it was sent (each
-- accepted); probes are answered with a closed connection.
local function stop_told(d, fake, id, staying)
    os.execute("kill -TERM " .. d.pid)
    local told, handed = false, 0
    fake:settimeout(0.05)
    daemon.wait_until("the broker to exit", function()
        local c = fake:accept()
        if c then
            local line = read_request(c)
            if line and line:find("^POST /api/v1/ephemeral/leaving[ ?]") then
                told = true
                answer(c, '{"id":"' .. id .. '","leaving":'
                          .. (staying and "false" or "true") .. '}')
            elseif line and line:find("^POST /api/v1/ephemeral/handover") then
                handed = handed + 1
                answer(c, '{"accepted":1}')
            end
            c:close()
        end
        return not d:alive()
    end)
    return told, handed
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

    it("hands its partitions to a member that said it stays, even one its "
       .. "view has not taken in", function()
        local fake = assert(socket.bind("127.0.0.1", 0))
        local _, port = fake:getsockname()
        local id = "f0000000000000c3"
        local d = daemon.start({ db = true, env = {
            QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
            QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400" } })
        finally(function()
            d.stopped = false
            d:stop()
            fake:close()
            daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                       .. id .. "'")
        end)
        -- Alone in its view (the member never answers a probe as itself),
        -- it serves every partition.
        daemon.member_row(TOKEN, id, "http://127.0.0.1:" .. port, 9, 600000)
        daemon.wait_until("the row read", function()
            for _, m in ipairs(d:cell().members) do
                if m.id == id then return not m.live end
            end
        end)
        for i = 1, 4 do
            assert.equals(201, d:push("kept", { tostring(i) }, "p-" .. i).status)
        end
        local log = d:read_log()
        local told, handed = stop_told(d, fake, id, true)
        assert.is_true(told)
        -- Its view holds it alone; the member that answered as staying is
        -- where its partitions go, not nowhere.
        log = d:read_log()
        assert.equals(4, handed, log)
        assert.truthy(log:find("event=partitions_handed_over partitions=4 "
                               .. "messages=4 dropped=0", 1, true), log)
    end)
end)
