-- The relay against an owner that does not answer as ephd does: a proxy's
-- error page, a status outside the list, a 204. The client of the edge
-- hears the closed taxonomy (ephemeral_forward_failed), never a stranger's
-- answer passed through; an owner's own answer is passed back as it came.
local socket = require("socket")
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
                -- The mark is signed: the token itself never reaches a
                -- peer, nor anyone reading the cell's traffic.
                assert.is_nil(bytes:find(TOKEN, 1, true), bytes)
                assert.matches("^[%x%-]+ %d+ " .. ("%x"):rep(64) .. "$", m)
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
