-- ephd.client's reader against canned answers: the three ways an HTTP/1.1
-- body may end (a length, chunks, the close).
local client = require("ephd.client")

-- A luasocket double over the text of one answer.
local function socket_of(text)
    local at = 1
    return {
        receive = function(_, what)
            if what == "*l" then
                local i = text:find("\n", at, true)
                if not i then return nil, "closed" end
                local line = text:sub(at, i - 1):gsub("\r$", "")
                at = i + 1
                return line
            elseif what == "*a" then
                local rest = text:sub(at)
                at = #text + 1
                return rest
            end
            if at + what - 1 > #text then return nil, "closed" end
            local bytes = text:sub(at, at + what - 1)
            at = at + what
            return bytes
        end,
    }
end

describe("ephd.client's pop", function()
    -- The request line each pop sends, answered with an empty batch.
    local function sent_by(opts)
        local c = client.new({ url = "http://127.0.0.1:1" })
        local line
        local sock = socket_of('HTTP/1.1 200 OK\r\nContent-Length: 27\r\n'
                               .. '\r\n{"queue":"q","messages":[]}')
        sock.getfd = function() return -1 end -- select passes it by
        sock.settimeout = function() end
        sock.send = function(_, text)
            line = text:match("^[^\r]*")
            return #text
        end
        c.sock = sock
        assert.same({}, assert(c:pop("q", opts)))
        return line
    end

    it("asks to commit on delivery by the name Queen 2.0.2 reads, given "
       .. "either name", function()
        local want = "GET /api/v1/ephemeral/pop?queue=q&commitOnDelivery=true"
                     .. " HTTP/1.1"
        assert.equals(want, sent_by({ commitOnDelivery = true }))
        assert.equals(want, sent_by({ autoAck = true }))
        assert.equals("GET /api/v1/ephemeral/pop?queue=q HTTP/1.1",
                      sent_by({}))
    end)
end)

describe("ephd.client.read_response", function()
    it("reads a body of a Content-Length", function()
        local status, headers, body = client.read_response(socket_of(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
        assert.same({ 200, "{}" }, { status, body })
        assert.is_nil(headers.connection)
    end)

    it("reads chunks, whatever the coding's case", function()
        local _, _, body = client.read_response(socket_of(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"
            .. "2\r\n{\"\r\n3\r\na\":\r\n2\r\n1}\r\n0\r\n\r\n"))
        assert.equals('{"a":1}', body)
    end)

    it("reads a body that ends at the close, and says the connection is "
       .. "done", function()
        local status, headers, body = client.read_response(socket_of(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
            .. '{"queues":[],"count":0}'))
        assert.same({ 200, '{"queues":[],"count":0}' }, { status, body })
        assert.equals("close", headers.connection)
    end)

    it("reads no body of a HEAD's answer", function()
        local status, _, body = client.read_response(socket_of(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"), true)
        assert.same({ 200, "" }, { status, body })
    end)
end)
