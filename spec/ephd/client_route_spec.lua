-- ephd.client's routing to owners (`route`), against canned brokers: the
-- view read once, each request sent to its owner's connection, acks to
-- the member of their ids' epoch, the view read again when a hint or an
-- owner_moved says it is stale (at most once a second), and a member
-- that cannot be reached left to the broker at url.
local client = require("ephd.client")
local placement = require("ephd.placement")
local socket = require("socket")

local T = "00000000-0000-0000-0000-000000000001"
local A, B = "http://127.0.0.1:1", "http://127.0.0.1:2"
local ID_A, ID_B = "0123456789abcdef", "1111111111111111"

local function answer(status, body, extra)
    return ("HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
            .. "Content-Length: %d\r\n%s\r\n%s"):format(status, #body,
                                                       extra or "", body)
end

-- The view of a cell of A and the member at b.
local function view(b)
    return answer(200, ('{"version":"00000000000000v1","self":"%s",'
        .. '"tenant":"%s","hash":"%s","fresh":true,"members":['
        .. '{"id":"%s","address":"%s","epoch":"0000000a"},'
        .. '{"id":"%s","address":"%s","epoch":"0000000b"}]}'):format(
        ID_A, T, placement.HASH, ID_A, A, ID_B, b))
end
local VIEW = view(B)

-- A broker double on c's connection: each request's line is recorded and
-- answered by respond(line), or, by default, as the broker would.
local function broker(c, respond)
    local lines, text, at = {}, "", 1
    c.sock = {
        getfd = function() return -1 end, -- select passes it by
        settimeout = function() end,
        close = function() end,
        send = function(_, request)
            local line = request:match("^[^\r]*")
            lines[#lines + 1] = line
            text, at = respond and respond(line) or nil, 1
            if not text then
                if line:find("/api/v1/ephemeral/cell", 1, true) then
                    text = VIEW
                elseif line:find("/ack", 1, true) then
                    text = answer(200, '{"results":[]}')
                else
                    text = answer(201, '{"pushed":1}')
                end
            end
            return #request
        end,
        receive = function(_, what)
            if what == "*l" then
                local i = text:find("\n", at, true)
                local line = text:sub(at, i - 1):gsub("\r$", "")
                at = i + 1
                return line
            end
            local bytes = text:sub(at, at + what - 1)
            at = at + what
            return bytes
        end,
    }
    return lines
end

-- A partition of queue "q" that the view gives to the member at address.
local function owned_by(address)
    local members = { { id = placement.id(ID_A), address = A },
                      { id = placement.id(ID_B), address = B } }
    for i = 1, 100 do
        if placement.owner(members, T, "q", "p-" .. i).address == address then
            return "p-" .. i
        end
    end
end

local PUSH = "POST /api/v1/ephemeral/push HTTP/1.1"
local VIEW_LINE = "GET /api/v1/ephemeral/cell HTTP/1.1"

-- A client routing to owners, with a double for the broker at url (A) and
-- for member B.
local function routed(respond_b)
    local c = client.new({ url = A, route = true })
    local home = broker(c)
    c.peers[B] = client.new({ url = B })
    local other = broker(c.peers[B], respond_b)
    return c, home, other
end

describe("ephd.client's routing to owners", function()
    it("is off unless asked: the broker at url gets everything", function()
        local c = client.new({ url = A })
        local home = broker(c)
        assert(c:push("q", { 1 }, { partition = owned_by(B) }))
        assert.same({ PUSH }, home)
    end)

    it("reads the view once and sends each push to its owner", function()
        local c, home, other = routed()
        assert(c:push("q", { 1 }, { partition = owned_by(A) }))
        assert(c:push("q", { 1 }, { partition = owned_by(B) }))
        assert(c:push("q", { 1 }, { partition = owned_by(B) }))
        assert.same({ VIEW_LINE, PUSH }, home)
        assert.same({ PUSH, PUSH }, other)
        -- A pop naming its partition too; one of the whole queue is the
        -- cell's to serve, through url.
        local function empty() return answer(200, '{"messages":[]}') end
        home, other = broker(c, empty), broker(c.peers[B], empty)
        assert(c:pop("q", { partition = owned_by(B) }))
        assert(c:pop("q"))
        assert.same({ "GET /api/v1/ephemeral/pop?queue=q HTTP/1.1" }, home)
        assert.same({ "GET /api/v1/ephemeral/pop?queue=q&partition="
                      .. owned_by(B) .. " HTTP/1.1" }, other)
    end)

    it("sends an ack to the member whose epoch its ids carry, and one of "
       .. "several holders to url", function()
        local c, home, other = routed()
        assert(c:ack("q", { "e:0000000b:p-1:1", "e:0000000B:p-2:7" }))
        assert.same({ VIEW_LINE }, home)
        assert.equals(1, #other)
        assert(c:ack("q", { "e:0000000b:p-1:2", "e:0000000a:p-2:8" }))
        assert(c:ack("q", { "e:000000ff:p-1:2" })) -- nobody's epoch
        assert.equals(3, #home)
        assert.equals(1, #other)
    end)

    it("reads the view again after a hint names another owner, at most "
       .. "once a second", function()
        local c, home = routed(function()
            return answer(201, '{"pushed":1}',
                          "X-Queen-Owner-Address: http://127.0.0.1:3\r\n")
        end)
        local p = owned_by(B)
        assert(c:push("q", { 1 }, { partition = p }))
        assert.is_true(c.view_stale)
        assert(c:push("q", { 1 }, { partition = p }))
        assert.same({ VIEW_LINE }, home) -- not within the second
        c.view_read_at = c.view_read_at - 1
        assert(c:push("q", { 1 }, { partition = p }))
        assert.same({ VIEW_LINE, VIEW_LINE }, home)
    end)

    it("reads the view again after owner_moved", function()
        local c = routed(function()
            return answer(503, '{"code":"owner_moved","error":"x"}',
                          "Retry-After: 1\r\n")
        end)
        local n, err = c:push("q", { 1 }, { partition = owned_by(B) })
        assert.is_nil(n)
        assert.equals("owner_moved", err.code)
        assert.is_true(c.view_stale)
    end)

    it("leaves a request for a member it cannot reach to the broker at url",
       function()
        -- A port nobody listens on: bound, then closed.
        local s = assert(socket.bind("127.0.0.1", 0))
        local _, port = s:getsockname()
        s:close()
        local gone = "http://127.0.0.1:" .. port
        local c = client.new({ url = A, route = true })
        local home = broker(c, function(line)
            if line == VIEW_LINE then return view(gone) end
        end)
        local members = { { id = placement.id(ID_A), address = A },
                          { id = placement.id(ID_B), address = gone } }
        local p
        for i = 1, 100 do
            if placement.owner(members, T, "q", "p-" .. i).address == gone then
                p = "p-" .. i
                break
            end
        end
        assert.equals(1, assert(c:push("q", { 1 }, { partition = p })))
        assert.same({ VIEW_LINE, PUSH }, home)
        assert.is_true(c.view_stale)
        -- Not dialled again for a while: straight to url.
        c.peers[gone] = nil
        assert.equals(1, assert(c:push("q", { 1 }, { partition = p })))
        assert.same({ VIEW_LINE, PUSH, PUSH }, home)
        assert.is_nil(c.peers[gone])
    end)
end)
