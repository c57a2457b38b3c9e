-- A member of a cell that is not a broker, run inside the spec's own
-- process (no child to start or kill): a listener that answers the members'
-- readiness probe as its id and epoch while `ready` holds, refuses
-- hand-overs, answers a group's announcement (a pop with notify=true) as a
-- member holding nothing, and keeps every other request it is sent (a
-- relayed push, pop or ack) for the spec to answer, in order, on the
-- connection it came on. It parses pipelined requests: any number in one
-- read, or one over several.
--
-- Nothing runs behind the spec's back: the fake reads, accepts and answers
-- only inside step() and pump(), which the spec calls while it waits.
local cjson = require("cjson")
local ffi = require("ffi")
local socket = require("socket")
local daemon = require("e2e.daemon")

ffi.cdef [[ int fcntl(int fd, int cmd, ...); ]]
local F_SETFD, FD_CLOEXEC = 2, 1

-- A broker the spec starts after the fake must not inherit its sockets:
-- it would hold the fake's port listening (a member's notice to the fake
-- then waits out its deadline in a backlog nobody reads) and its lines
-- open (a close the spec makes would reach no one).
local function private(s)
    assert(ffi.C.fcntl(s:getfd(), F_SETFD, ffi.cast("int", FD_CLOEXEC)) == 0)
    return s
end

local _M = {}
_M.__index = _M

local Line = {} -- one accepted connection
Line.__index = Line

local issued = 0

-- A fake member: id (16 hex digits) and epoch are made up unless given.
function _M.new(opts)
    opts = opts or {}
    issued = issued + 1
    local self = setmetatable({
        id = opts.id or ("fa1e00000000%04x"):format(issued),
        epoch = opts.epoch or 61681,
        ready = true,
        lines = {},    -- every connection accepted, in order
        requests = {}, -- every relayed request read, in order
        probes = 0,
    }, _M)
    -- A fake's row a spec that failed left behind would be in every
    -- later spec's cell for its TTL.
    daemon.sql("DELETE FROM queen.ephemeral_members WHERE id LIKE "
               .. "'fa1e00000000%'")
    self.server = private(assert(socket.bind("127.0.0.1", 0)))
    self.server:settimeout(0)
    local _, port = self.server:getsockname()
    self.port = port
    self.address = "http://127.0.0.1:" .. port
    return self
end

-- Joins the cell of the brokers ds: writes its member row signed with
-- token, and answers probes until each broker counts `live` members.
function _M:join(token, ds, live)
    daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
               .. self.id .. "'")
    daemon.member_row(token, self.id, self.address, self.epoch, 600000)
    self:pump(function()
        local views = {}
        for i, d in ipairs(ds) do views[i] = cjson.encode(d:cell()) end
        return "the cell to take fake member " .. self.id .. ", in views "
               .. table.concat(views, "\n")
    end, function()
        for _, d in ipairs(ds) do
            if d:cell().live ~= live then return false end
        end
        return true
    end, 10)
end

-- Leaves no trace: its row and its sockets. Close it before stopping the
-- brokers: a stopping broker tells each member it leaves, and waits for
-- an answer from a fake that is no longer served, where a closed port
-- refuses at once.
function _M:close()
    daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
               .. self.id .. "'")
    for _, l in ipairs(self.lines) do l.sock:close() end
    self.server:close()
end

local function answer_bytes(status, body, extra)
    return ("HTTP/1.1 %d X\r\nContent-Type: application/json\r\n%s"
            .. "Content-Length: %d\r\n\r\n%s"):format(status, extra or "",
                                                      #body, body)
end
_M.answer_bytes = answer_bytes

-- The whole requests at the front of l.buf, each handled as it is parsed.
function Line:parse(fake)
    while true do
        local head_end = self.buf:find("\r\n\r\n", 1, true)
        if not head_end then return end
        local head = self.buf:sub(1, head_end + 1)
        local length = tonumber(head:lower():match(
            "\r\ncontent%-length:%s*(%d+)")) or 0
        if #self.buf < head_end + 3 + length then return end
        local method, target = head:match("^(%u+) (%S+)")
        local req = {
            line = self, method = method, target = target, head = head,
            body = self.buf:sub(head_end + 4, head_end + 3 + length),
            read = self.reads, -- the read of the line that completed it
        }
        self.buf = self.buf:sub(head_end + 4 + length)
        fake:handle(req)
    end
end

function _M:handle(req)
    local l = req.line
    if req.target:find("^/api/v1/ephemeral/ready") then
        self.probes = self.probes + 1
        if self.ready then
            l:send(answer_bytes(200, ('{"id":"%s","epoch":%d,"ready":true}')
                                     :format(self.id, self.epoch)))
        end
        l:close()
    elseif req.target:find("^/api/v1/ephemeral/handover") then
        l:send(answer_bytes(503, '{"error":"not a broker",'
                                 .. '"code":"ephemeral_unavailable"}'))
        l:close()
    elseif req.target:find("notify=true", 1, true) then
        l:send(answer_bytes(200, '{"queue":"q","messages":[]}'))
    else
        l.requests[#l.requests + 1] = req
        self.requests[#self.requests + 1] = req
        req.payload = tonumber(req.body:match('"payload":(%d+)'))
        if self.on_request then self.on_request(req) end
    end
end

function Line:send(bytes)
    if not self.closed then self.sock:send(bytes) end
end

-- Answers req (a table of the fake's requests) on its line.
function _M.answer(req, status, body, extra)
    req.line:send(answer_bytes(status, body, extra))
    req.answered = true
end

-- A FIN after whatever was sent.
function Line:close()
    if self.closed then return end
    self.closed = true
    self.sock:close()
end

-- An RST: unsent bytes dropped, the peer's next read fails with a reset.
function Line:reset()
    if self.closed then return end
    self.closed = true
    self.sock:setoption("linger", { on = true, timeout = 0 })
    self.sock:close()
end

-- Accepts and reads whatever is ready, for up to `timeout` seconds of
-- waiting for something to be.
function _M:step(timeout)
    local watch = { self.server }
    for _, l in ipairs(self.lines) do
        if not l.closed and not l.eof then watch[#watch + 1] = l.sock end
    end
    local readable = socket.select(watch, nil, timeout or 0)
    for _, s in ipairs(readable) do
        if s == self.server then
            local c = self.server:accept()
            if c then
                private(c)
                c:settimeout(0)
                c:setoption("tcp-nodelay", true)
                local l = setmetatable({ sock = c, buf = "", reads = 0,
                                         requests = {}, n = #self.lines + 1 },
                                       Line)
                self.lines[#self.lines + 1] = l
            end
        else
            local l
            for _, x in ipairs(self.lines) do
                if x.sock == s then l = x end
            end
            local data, err, partial = s:receive(65536)
            data = data or partial
            if data and #data > 0 then
                l.reads = l.reads + 1
                l.buf = l.buf .. data
                l:parse(self)
            end
            if err == "closed" then l.eof = true end
        end
    end
end

-- Serves until cond() is truthy, failing after `seconds` naming what (a
-- string, or a function saying it).
-- Returns cond's value.
function _M:pump(what, cond, seconds)
    local deadline = socket.gettime() + (seconds or 10)
    while true do
        self:step(0.01)
        local v = cond()
        if v then return v end
        if socket.gettime() > deadline then
            if type(what) == "function" then what = what() end
            error(("waited %g s for %s"):format(seconds or 10, what), 2)
        end
    end
end

return _M
