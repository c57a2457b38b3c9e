-- A member of a cell that is not a broker: a listener that plays member
-- ID of EPOCH to the brokers (its readiness probe, a hand-over, a leaving
-- notice, a group's announcement) and hands every other request it is
-- sent (a relayed push, pop or ack) to the spec, each answered by route
-- as the spec says. It parses pipelined requests: any number in one read,
-- or one over several; an answer goes on the connection its request came
-- on, in the order the spec gives them.
--
-- Two ways to run it:
--  - inside the spec's process (require "e2e.fake_member"): nothing runs
--    behind the spec's back, the fake reads, accepts and answers only in
--    step() and pump(), which the spec calls while it waits;
--  - as a process of its own, for a fake that must answer while the spec
--    blocks on a broker: `luajit fake_member.lua MODE PORT ID EPOCH ...`,
--    MODE one of the plays at the end of this file (silent, moved,
--    hinting).
local cjson = require("cjson")
local ffi = require("ffi")
local socket = require("socket")

-- Only for join and close: a fake run as a process has no spec beside it.
local function daemon() return require("e2e.daemon") end

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

-- A fake member: id (16 hex digits), epoch and port are made up unless
-- opts gives them; opts.routes overrides what it does with a kind of
-- request (see ROUTES).
function _M.new(opts)
    opts = opts or {}
    issued = issued + 1
    local self = setmetatable({
        id = opts.id or ("fa1e00000000%04x"):format(issued),
        epoch = opts.epoch or 61681,
        ready = true,  -- or a function saying whether it is
        routes = setmetatable(opts.routes or {}, { __index = _M.ROUTES }),
        lines = {},    -- every connection accepted, in order
        requests = {}, -- every relayed request read, in order
        seen = {},     -- how many requests of each kind (ROUTES) came
    }, _M)
    self.server = private(assert(socket.bind("127.0.0.1", opts.port or 0)))
    self.server:settimeout(0)
    local _, port = self.server:getsockname()
    self.port = port
    self.address = "http://127.0.0.1:" .. port
    return self
end

-- Joins the cell of the brokers ds: writes its member row signed with
-- token, and answers probes until each broker counts `live` members.
function _M:join(token, ds, live)
    -- A fake's row a spec that failed left behind would be in every
    -- later spec's cell for its TTL.
    daemon().sql("DELETE FROM queen.ephemeral_members WHERE id LIKE "
                 .. "'fa1e00000000%'")
    daemon().member_row(token, self.id, self.address, self.epoch, 600000)
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
    daemon().sql("DELETE FROM queen.ephemeral_members WHERE id = '"
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

-- The whole requests at the front of l.buf, each handled as it is parsed;
-- a line that answered early (on_head) reads on and forgets.
function Line:parse(fake)
    while not self.early do
        local head_end = self.buf:find("\r\n\r\n", 1, true)
        if not head_end then return end
        local head = self.buf:sub(1, head_end + 1)
        local length = tonumber(head:lower():match(
            "\r\ncontent%-length:%s*(%d+)")) or 0
        if #self.buf < head_end + 3 + length then
            -- A spec's on_head(line, head) may answer before the body is
            -- read, as a server refusing early does: true if it did.
            if fake.on_head and fake.on_head(self, head) then
                self.early = true
                self.buf = ""
            end
            return
        end
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

-- Which route a request takes.
local function kind_of(req)
    local t = req.target
    if t:find("^/api/v1/ephemeral/ready") then return "ready" end
    if t:find("^/api/v1/ephemeral/handover") then return "handover" end
    if t:find("^/api/v1/ephemeral/leaving") then return "leaving" end
    if t:find("notify=true", 1, true) then return "notify" end
    return "relayed"
end

-- What the fake does with each kind of request, by default: a function
-- of the fake and the request (its line, method, target, head, body).
_M.ROUTES = {
    -- Ready as its id and epoch while it is; the connection closed
    -- after, so nothing else is sent on it.
    ready = function(self, req)
        local ready = self.ready
        if type(ready) == "function" then ready = ready() end
        if ready then
            req.line:send(answer_bytes(200, ('{"id":"%s","epoch":%d,'
                                             .. '"ready":true}')
                                            :format(self.id, self.epoch)))
        end
        req.line:close()
    end,
    -- Refused: a brokers' hand-over to it is tried again elsewhere.
    handover = function(_, req)
        req.line:send(answer_bytes(503, '{"error":"not a broker",'
                                        .. '"code":"ephemeral_unavailable"}'))
        req.line:close()
    end,
    leaving = function(self, req)
        req.line:send(answer_bytes(200, ('{"id":"%s","leaving":true}')
                                        :format(self.id)))
        req.line:close()
    end,
    -- A member that holds nothing of the queue.
    notify = function(_, req)
        req.line:send(answer_bytes(200, '{"queue":"q","messages":[]}'))
    end,
    -- Kept for the spec: in requests, and told to on_request.
    relayed = function(self, req)
        local l = req.line
        l.requests[#l.requests + 1] = req
        self.requests[#self.requests + 1] = req
        req.payload = tonumber(req.body:match('"payload":(%d+)'))
        if self.on_request then self.on_request(req) end
    end,
}

function _M:handle(req)
    local kind = kind_of(req)
    self.seen[kind] = (self.seen[kind] or 0) + 1
    self.routes[kind](self, req)
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
-- waiting for something to be; a line a spec set `paused` is not read (its
-- peer's writes to it stall once the socket's buffers are full).
function _M:step(timeout)
    local watch = { self.server }
    for _, l in ipairs(self.lines) do
        if not l.closed and not l.eof and not l.paused then
            watch[#watch + 1] = l.sock
        end
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
                l.bytes = (l.bytes or 0) + #data
                if not l.early then
                    l.buf = l.buf .. data
                    l:parse(self)
                end
            end
            if err == "closed" then
                l.eof = true
                l:close()
            end
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

-- The plays of a fake run as a process (see the top), by MODE, each given
-- the fake and the arguments after EPOCH.
local PLAYS = {}

-- Holds every request but the probe unanswered, its connection open,
-- until it is killed: a peer that accepts and never answers (a hand-over
-- to it fills the window for ever).
-- usage: silent PORT ID EPOCH
function PLAYS.silent(fake)
    for _, kind in ipairs({ "handover", "leaving", "notify" }) do
        fake.routes[kind] = _M.ROUTES.relayed
    end
end

-- For each relayed request leaves the cell (runs SQL_COMMAND, which
-- deletes its row), waits until each broker at URL... counts LIVE members
-- (for up to 10 s: the spec then fails on the owner_moved that never comes
-- in time), and answers 503 owner_moved, as an owner whose view changed
-- would. A hand-over is refused, so it stays in the cell until a relayed
-- request reaches it.
-- usage: moved PORT ID EPOCH SQL_COMMAND LIVE URL...
function PLAYS.moved(fake, leave, live, ...)
    local http = require("socket.http")
    local brokers, live_n = { ... }, tonumber(live)
    fake.routes.relayed = function(_, req)
        os.execute(leave)
        local deadline = socket.gettime() + 10
        for _, url in ipairs(brokers) do
            repeat
                local body = http.request(url .. "/api/v1/system/cell")
                local ok, view = pcall(cjson.decode, body or "")
                if ok and view.live == live_n then break end
                socket.sleep(0.05)
            until socket.gettime() > deadline
        end
        _M.answer(req, 503, '{"error":"this broker does not own the '
                            .. 'partition; retry soon","code":"owner_moved"}',
                  "Retry-After: 1\r\n")
        req.line:close()
    end
    fake.routes.notify = fake.routes.relayed
end

-- Ready while the file READY exists (its probe's connection closed
-- unanswered otherwise), and answers each relayed request (a group's
-- announcement included) 503 owner_moved naming, in X-Queen-Owner, the
-- member whose id the file HINT holds, as a broker whose view gives the
-- partition to that member does, after appending its target and body to
-- the file SEEN.
-- usage: hinting PORT ID EPOCH READY HINT SEEN
function PLAYS.hinting(fake, ready_file, hint_file, seen_file)
    local function read_file(path)
        local f = io.open(path)
        if not f then return nil end
        local s = f:read("*a")
        f:close()
        return s
    end
    fake.ready = function() return read_file(ready_file) ~= nil end
    fake.routes.relayed = function(_, req)
        local f = io.open(seen_file, "a")
        f:write(req.target, " ", req.body, "\n")
        f:close()
        _M.answer(req, 503, '{"error":"this broker does not own the '
                            .. 'partition; retry soon","code":"owner_moved"}',
                  "Retry-After: 1\r\nX-Queen-Owner: "
                  .. (read_file(hint_file) or "") .. "\r\n")
        req.line:close()
    end
    fake.routes.notify = fake.routes.relayed
end

if type(arg) == "table" and arg[0] and arg[0]:find("fake_member%.lua$") then
    local mode, port, id, epoch = arg[1], tonumber(arg[2]), arg[3], arg[4]
    local fake = _M.new({ port = port, id = id, epoch = tonumber(epoch) })
    assert(PLAYS[mode], "no such play: " .. tostring(mode))(
        fake, select(5, unpack(arg)))
    io.stdout:write("listening\n")
    io.stdout:flush()
    while true do fake:step(1) end
end

return _M
