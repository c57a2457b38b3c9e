-- The relay against an owner that does not answer as ephd does: a proxy's
-- error page, a status outside the list, a 204. The client of the edge
-- hears the closed taxonomy (ephemeral_forward_failed), never a stranger's
-- answer passed through; an owner's own answer is passed back as it came.
-- And what the edge does with a relay its owner holds: a pop that commits
-- on delivery, and a stop while relays are out.
local cjson = require("cjson")
local socket = require("socket")
local mark = require("e2e.mark")
local daemon = require("e2e.daemon")

local TOKEN = "relay-owner-spec-token-0123456789"
local ENV = { QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
              QUEEN_EPHEMERAL_MEMBER_TTL_MS = "60000" }
local FAKE_ID = "fa4e0000000000f1"

-- One relayed request read off an accepted connection: every byte of it,
-- and its mark.
local function read_request(c)
    local length, bytes, m = 0, {}, nil
    while true do
        local line = assert(c:receive("*l"))
        bytes[#bytes + 1] = line .. "\r\n"
        if line == "" then break end
        local n = line:lower():match("^content%-length:%s*(%d+)")
        if n then length = tonumber(n) end
        m = line:match("^[Xx]%-[Qq]ueen%-[Ff]orward: (.*)$") or m
    end
    if length > 0 then bytes[#bytes + 1] = assert(c:receive(length)) end
    return table.concat(bytes), m
end

describe("the relay, facing an owner that is not ephd", function()
    it("answers ephemeral_forward_failed for an answer ephd never gives, "
       .. "and passes an owner's own answer back", function()
        local fake = assert(socket.bind("127.0.0.1", 0))
        local _, port = fake:getsockname()
        local a = daemon.start({ db = true, env = ENV })
        finally(function()
            a:stop()
            fake:close()
            daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                       .. FAKE_ID .. "'")
        end)
        -- The table is the broker's to create: the fake joins after it.
        daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                   .. FAKE_ID .. "'")
        daemon.member_row(TOKEN, FAKE_ID, "http://127.0.0.1:" .. port, 61681,
                          600000)
        daemon.answer_ready(fake, FAKE_ID, 61681,
                            function() return a:cell().live == 2 end)

        local function push(partition)
            local c = a:connect()
            c:send(daemon.format("POST", "/api/v1/ephemeral/push",
                                 '{"queue":"q","partition":"' .. partition
                                 .. '","messages":[{"payload":1}]}'))
            return c
        end
        -- A partition the fake owns: its push reaches the fake.
        local part
        fake:settimeout(5)
        for i = 1, 64 do
            local c = push("p" .. i)
            -- Whichever comes first: the fake hears the push, or a answers.
            local ready = socket.select({ fake, c.sock }, nil, 5)
            if ready[fake] then
                local peer = assert(fake:accept())
                local bytes, m = read_request(peer)
                -- The token itself never reaches a peer, nor anyone
                -- reading the cell's traffic: the connection's first
                -- request opens a session signed for the peer it dialled,
                -- and the mark names the tenant.
                assert.is_nil(bytes:find(TOKEN, 1, true), bytes)
                assert.matches("^[%x%-]+$", m)
                local ms, n = bytes:match("\r\nX%-Queen%-Session: (%d+) "
                                          .. "(%x+) %x+\r\n")
                assert.truthy(ms, bytes)
                assert.truthy(bytes:find("X-Queen-Session: " .. mark.session(
                    TOKEN, "127.0.0.1:" .. port, tonumber(ms), n), 1, true),
                    bytes)
                peer:send("HTTP/1.1 201 Created\r\nContent-Type: "
                          .. "application/json\r\nContent-Length: 12\r\n"
                          .. "Connection: close\r\n\r\n{\"pushed\":1}")
                peer:close()
                local res = assert(c:receive())
                assert.equals(201, res.status, res.body)
                part = "p" .. i
                c:close()
                break
            end
            assert.equals(201, assert(c:receive()).status)
            c:close()
        end
        assert.is_truthy(part, "no partition of the fake owner's in 64")

        local function through(answer)
            local c = push(part)
            local peer = assert(fake:accept())
            read_request(peer)
            peer:send(answer)
            peer:close()
            local res = assert(c:receive())
            c:close()
            return res
        end
        local strangers = {
            "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\n"
                .. "Content-Length: 19\r\n\r\n<html>gateway</html",
            "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain"
                .. "\r\nContent-Length: 4\r\n\r\noops",
            "HTTP/1.1 999 Whatever\r\nContent-Type: application/json\r\n"
                .. "Content-Length: 2\r\n\r\n{}",
            "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
        }
        for _, answer in ipairs(strangers) do
            local res = through(answer)
            assert.equals(503, res.status, answer)
            assert.equals("ephemeral_forward_failed", res.json.code, res.body)
            assert.equals("application/json", res.headers["content-type"])
        end
        -- The owner's own refusal comes back as it was, Retry-After
        -- included when it is a number of seconds.
        local function json_answer(status, headers, body)
            return ("HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                    .. "%sContent-Length: %d\r\nConnection: close\r\n\r\n%s")
                   :format(status, headers, #body, body)
        end
        local res = through(json_answer(429, "Retry-After: 7\r\n",
            '{"error":"slow down","code":"rate_limited"}'))
        assert.equals(429, res.status)
        assert.equals("rate_limited", res.json.code)
        assert.equals("7", res.headers["retry-after"])
        res = through(json_answer(503, "Retry-After: soon\r\n",
            '{"error":"busy","code":"ephemeral_unavailable"}'))
        assert.equals(503, res.status)
        assert.equals("ephemeral_unavailable", res.json.code)
        assert.is_nil(res.headers["retry-after"])
    end)
end)

-- An answer from the fake, on a connection it then closes.
local function answer(peer, status, body)
    peer:send(("HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
               .. "Content-Length: %d\r\nConnection: close\r\n\r\n%s")
              :format(status, #body, body))
    peer:close()
end

-- A group's first pop through the broker is announced to every member
-- (docs/cell.md, "A queue's groups"): a marked pop with notify=true, which
-- the fake answers as a member that holds nothing.
local function announcement(request)
    return request:match("^[^\r]*"):find("notify=true", 1, true) ~= nil
end

-- The next request relayed to the fake, its announcements answered on the
-- way: the connection, and the request's bytes and mark.
local function accept_relayed(fake)
    while true do
        local peer = assert(fake:accept())
        local request, m = read_request(peer)
        if not announcement(request) then return peer, request, m end
        answer(peer, 200, '{"queue":"q","messages":[]}')
    end
end

-- A broker with a fake member beside it, which owns some partitions: the
-- fake's socket, a partition of queue q it owns (found by relayed pops that
-- make nothing at the broker), and a cleanup.
local function beside_a_fake()
    local fake = assert(socket.bind("127.0.0.1", 0))
    local _, port = fake:getsockname()
    local a = daemon.start({ db = true, env = ENV })
    local function cleanup()
        a:stop()
        fake:close()
        daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                   .. FAKE_ID .. "'")
    end
    local ok, part = pcall(function()
        daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                   .. FAKE_ID .. "'")
        daemon.member_row(TOKEN, FAKE_ID, "http://127.0.0.1:" .. port, 61681,
                          600000)
        daemon.answer_ready(fake, FAKE_ID, 61681,
                            function() return a:cell().live == 2 end)
        fake:settimeout(5)
        for i = 1, 64 do
            local c = a:connect()
            c:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=q"
                                        .. "&partition=p" .. i))
            -- Until the client's answer comes: the fake answers what it
            -- is sent, announcements included.
            local relayed = false
            while true do
                local ready = socket.select({ fake, c.sock }, nil, 5)
                if not ready[fake] then break end
                local peer = assert(fake:accept())
                relayed = relayed or not announcement(read_request(peer))
                answer(peer, 200, '{"queue":"q","messages":[]}')
            end
            assert.equals(200, assert(c:receive()).status)
            c:close()
            if relayed then return "p" .. i end
        end
        error("no partition of the fake owner's in 64")
    end)
    if not ok then
        cleanup()
        error(part, 0)
    end
    return a, fake, part, cleanup
end

describe("the relay, to an owner it waits on", function()
    it("leases a pop that commits on delivery at its owner, and acks it "
       .. "there once the client has the batch", function()
        local a, fake, part, cleanup = beside_a_fake()
        finally(cleanup)
        local c = a:connect()
        c:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=q&partition="
                                    .. part .. "&group=g&commitOnDelivery=true"
                                    .. "&batch=5"))
        local peer, request = accept_relayed(fake)
        -- Sent on without it: committed at the owner before the client has
        -- it, a batch whose answer never arrives would be lost.
        assert.matches("^GET /api/v1/ephemeral/pop%?", request)
        assert.is_nil(request:find("commitOnDelivery", 1, true), request)
        assert.truthy(request:find("group=g", 1, true), request)
        local id = "0000000a-0000-0000-0000-000000000001"
        answer(peer, 200, '{"queue":"q","messages":[{"id":"' .. id
                          .. '","partition":"' .. part
                          .. '","attempts":1,"payload":7}]}')
        local res = assert(c:receive())
        assert.equals(200, res.status, res.body)
        assert.equals(id, res.json.messages[1].id)
        c:close()
        -- Then acked where it was taken, for the pop's group.
        peer = assert(fake:accept())
        local ack, mark = read_request(peer)
        answer(peer, 200, '{"results":[{"id":"' .. id
                          .. '","outcome":"completed"}]}')
        assert.matches("^POST /api/v1/ephemeral/ack ", ack)
        assert.truthy(mark, ack)
        local body = cjson.decode(ack:match("\r\n\r\n(.*)$"))
        assert.same({ queue = "q", group = "g", acks = { { id = id } } }, body)
    end)

    it("lets a relayed push finish with its owner's answer when it stops, "
       .. "and cuts a relayed wait short with an empty batch", function()
        local a, fake, part, cleanup = beside_a_fake()
        finally(cleanup)
        local waiting = a:connect()
        waiting:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=q"
                                          .. "&partition=" .. part
                                          .. "&wait=true&timeout=30000"))
        local parked = accept_relayed(fake)
        local pushing = a:connect()
        pushing:send(daemon.format("POST", "/api/v1/ephemeral/push",
                                   '{"queue":"q","partition":"' .. part
                                   .. '","messages":[{"payload":1}]}'))
        local push = accept_relayed(fake)
        os.execute("kill -TERM " .. a.pid)
        -- The leaving notice, answered as a member staying.
        local notice = assert(fake:accept())
        assert.matches("^POST /api/v1/ephemeral/leaving%?id=%x+&epoch=%d+ ",
                       read_request(notice))
        answer(notice, 200, '{"id":"' .. FAKE_ID .. '","leaving":false}')
        local res = assert(waiting:receive())
        assert.equals(200, res.status, res.body)
        assert.same({}, res.json.messages)
        -- The owner answers the push after the stop began: the client
        -- hears that answer, not a failure for a push that was applied.
        answer(push, 201, '{"pushed":1}')
        res = assert(pushing:receive())
        assert.equals(201, res.status, res.body)
        parked:close()
        a:await_exit(10)
    end)
end)
