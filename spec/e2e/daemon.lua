-- Starts a real ephd on a free loopback port and speaks HTTP/1.1 to it
-- over real sockets (luasocket), including raw bytes for hostile cases.
local socket = require("socket")
local cjson = require("cjson")
local client = require("ephd.client")
local helper = require("helper")

local _M = {}
_M.__index = _M

-- A port for a broker: within $EPHD_TEST_PORTS when it is set.
local function free_port()
    local p = io.popen(helper.root .. "/scripts/free-port 2>&1")
    local out = p:read("*a")
    p:close()
    return tonumber(out) or error("scripts/free-port: " .. out)
end
_M.free_port = free_port

local function shell_quote(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- The private cluster the ctest fixture started (scripts/pg.sh).
local PG_DIR = os.getenv("EPHD_TEST_PG_DIR")
    or (helper.build .. "/pg-test")

local function pg_script(cmd)
    local p = io.popen(helper.root .. "/scripts/pg.sh " .. cmd .. " "
                       .. PG_DIR .. " 2>&1")
    local out = p:read("*a")
    p:close()
    return (out:gsub("%s+$", ""))
end

_M.database_url = pg_script("url")

function _M.pg_stop() pg_script("stop") end
function _M.pg_start() pg_script("start") end

-- Runs SQL through psql; returns its unaligned output.
function _M.sql(statement)
    local p = io.popen("psql '" .. _M.database_url .. "' -XAtq -v "
                       .. "ON_ERROR_STOP=0 -c " .. shell_quote(statement)
                       .. " 2>&1")
    local out = p:read("*a")
    p:close()
    return (out:gsub("%s+$", ""))
end

-- The MAC a member signs its row with (core/cell/members.c): HMAC-SHA256 with
-- the cell token over its id, address, epoch and TTL, in lowercase hex.
function _M.member_mac(token, id, address, epoch, ttl_ms)
    local msg = ("ephd-member-v1\n%s\n%s\n%d\n%d"):format(id, address,
                                                          epoch, ttl_ms)
    local p = io.popen("printf '%s' " .. shell_quote(msg)
                       .. " | openssl dgst -sha256 -hmac "
                       .. shell_quote(token) .. " -r")
    local out = p:read("*a")
    p:close()
    return assert(out:match("^(%x+)"), out)
end

-- Writes a member's row by hand, signed with token (unsigned without one),
-- as a broker's beat would, replacing any row of that id.
function _M.member_row(token, id, address, epoch, ttl_ms, last_seen)
    local mac = token and ("'" .. _M.member_mac(token, id, address, epoch,
                                                ttl_ms) .. "'") or "NULL"
    return _M.sql(("DELETE FROM queen.ephemeral_members WHERE id = '%s'; "
                   .. "INSERT INTO queen.ephemeral_members (id, address, "
                   .. "epoch, ttl_ms, mac, last_seen) VALUES ('%s', '%s', %d, "
                   .. "%d, %s, %s)"):format(id, id, address, epoch, ttl_ms, mac,
                                           last_seen or "now()"))
end

-- Plays member id of epoch behind server (a luasocket listener): answers
-- the members' readiness probes (core/cell/members.c) until done() holds, for
-- up to `seconds` (10), each on a connection it closes, so the relay
-- sends nothing else there.
-- done is given how many probes were answered.
function _M.answer_ready(server, id, epoch, done, seconds)
    local body = ('{"id":"%s","epoch":%d,"ready":true}'):format(id, epoch)
    local answered = 0
    server:settimeout(0.05)
    _M.wait_until("the cell to take member " .. id, function()
        local c = server:accept()
        if c then
            answered = answered + 1
            c:settimeout(5)
            repeat local line = c:receive("*l") until not line or line == ""
            c:send("HTTP/1.1 200 OK\r\nConnection: close\r\n"
                   .. "Content-Type: application/json\r\nContent-Length: "
                   .. #body .. "\r\n\r\n" .. body)
            c:close()
        end
        return done(answered)
    end, seconds)
    server:settimeout(nil)
end

-- Declarations of earlier specs would leak into this one's listings.
function _M.forget_declarations()
    _M.sql("TRUNCATE queen.ephemeral_queues")
end

-- opts.env: extra environment, opts.args: extra flags, opts.db: connect
-- to the private cluster (or to opts.db when it is a URL), opts.port: this
-- port (a broker started again where one stopped) rather than a free one.
function _M.start(opts)
    opts = opts or {}
    local self = setmetatable({}, _M)
    self.port = opts.port or free_port()
    if opts.db then
        local url = opts.db == true and _M.database_url or opts.db
        opts.args = opts.args or {}
        opts.args[#opts.args + 1] = "--database-url " .. shell_quote(url)
    end
    self.log = os.tmpname()
    local env = {}
    for k, v in pairs(opts.env or {}) do
        env[#env + 1] = k .. "=" .. shell_quote(v)
    end
    local cmd = ("%s %s/ephd --listen 127.0.0.1:%d %s >%s 2>&1 & echo $!")
        :format(table.concat(env, " "), helper.build, self.port,
                table.concat(opts.args or {}, " "), self.log)
    local p = io.popen(cmd)
    self.pid = tonumber(p:read("*l"))
    p:close()
    for _ = 1, 500 do
        local c = socket.connect("127.0.0.1", self.port)
        if c then
            c:close()
            return self
        end
        if not self:alive() then break end
        socket.sleep(0.01)
    end
    error("ephd did not start: " .. self:read_log())
end

-- The daemon is orphaned by the shell that started it, so once it exits it
-- may linger as a zombie until init reaps it: that counts as gone.
function _M:alive()
    local f = io.open("/proc/" .. self.pid .. "/stat")
    if not f then return false end
    local stat = f:read("*l") or ""
    f:close()
    return not stat:find("^%d+ %b() Z")
end

function _M:read_log()
    local f = io.open(self.log)
    local text = f and f:read("*a") or ""
    if f then f:close() end
    return text
end

-- Waits up to `seconds` for `text` (plain) in the log; returns the log.
function _M:await_log(text, seconds)
    local t0 = _M.now()
    local log = self:read_log()
    while not log:find(text, 1, true) and _M.now() - t0 < seconds do
        _M.sleep(0.05)
        log = self:read_log()
    end
    return log
end

-- Stops with SIGTERM and returns the seconds it took to exit. A daemon that
-- did not stop cleanly, or whose sanitizers reported anything (leaks are
-- reported at exit), fails the spec that stopped it.
function _M:stop()
    if self.stopped then return 0 end
    self.stopped = true
    local t0 = socket.gettime()
    os.execute("kill -TERM " .. self.pid .. " 2>/dev/null")
    while self:alive() do
        socket.sleep(0.005)
        if socket.gettime() - t0 > 10 then
            os.execute("kill -KILL " .. self.pid)
            error("ephd did not stop within 10 s")
        end
    end
    local took = socket.gettime() - t0
    local log = self:read_log()
    os.remove(self.log)
    if log:find("Sanitizer", 1, true) or log:find("runtime error", 1, true)
            or not log:find(" event=stopped\n", 1, true) then
        error("ephd did not stop cleanly:\n" .. log)
    end
    return took
end

-- A keep-alive connection.
local Conn = {}
Conn.__index = Conn

function _M:connect()
    local s = assert(socket.connect("127.0.0.1", self.port))
    s:setoption("tcp-nodelay", true)
    s:settimeout(10)
    return setmetatable({ sock = s }, Conn)
end

function Conn:send(raw)
    assert(self.sock:send(raw))
end

function Conn:close()
    self.sock:close()
end

-- A request's bytes. Host is "test" and a body is JSON unless headers say
-- otherwise (a header given as false is left out).
function _M.format(method, path, body, headers)
    headers = headers or {}
    local named = {}
    for k in pairs(headers) do named[k:lower()] = true end
    local lines = { method .. " " .. path .. " HTTP/1.1" }
    if not named.host then lines[#lines + 1] = "Host: test" end
    if body and not named["content-type"] then
        lines[#lines + 1] = "Content-Type: application/json"
    end
    for k, v in pairs(headers) do
        if v then lines[#lines + 1] = k .. ": " .. v end
    end
    if body then lines[#lines + 1] = "Content-Length: " .. #body end
    return table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or "")
end

-- Reads one response; nil, err on timeout or a closed connection. The
-- answer to a HEAD has no body whatever its Content-Length says.
function Conn:receive(timeout, head)
    self.sock:settimeout(timeout or 10)
    local status, headers, body = client.read_response(self.sock, head)
    if not status then return nil, headers end
    local res = { status = status, headers = headers, body = body }
    local ok, json = pcall(cjson.decode, body)
    if ok then res.json = json end
    return res
end

function Conn:request(method, path, body, headers)
    self:send(_M.format(method, path, body, headers))
    return assert(self:receive())
end

-- One request on a fresh connection.
function _M:request(method, path, body, headers)
    local c = self:connect()
    local res = c:request(method, path, body, headers)
    c:close()
    return res
end

function _M:push(queue, payloads, partition, headers)
    local msgs = {}
    for i, p in ipairs(payloads) do msgs[i] = '{"payload":' .. p .. '}' end
    local body = '{"queue":' .. cjson.encode(queue)
                 .. (partition and (',"partition":' .. cjson.encode(partition))
                     or "")
                 .. ',"messages":[' .. table.concat(msgs, ",") .. ']}'
    return self:request("POST", "/api/v1/ephemeral/push", body, headers)
end

function _M:pop(query, headers)
    return self:request("GET", "/api/v1/ephemeral/pop?" .. query, nil, headers)
end

function _M:ack(queue, group, acks)
    local items = {}
    for i, a in ipairs(acks) do
        items[i] = cjson.encode({ id = a[1], status = a[2] })
    end
    local body = '{"queue":' .. cjson.encode(queue)
                 .. (group and (',"group":' .. cjson.encode(group)) or "")
                 .. ',"acks":[' .. table.concat(items, ",") .. ']}'
    return self:request("POST", "/api/v1/ephemeral/ack", body)
end

function _M:depth(queue, group)
    return self:request("GET", "/api/v1/ephemeral/queues/" .. queue
                               .. "/depth" .. (group and ("?group=" .. group)
                                               or ""))
end

-- This broker's view of its cell (GET /api/v1/system/cell), decoded.
function _M:cell()
    local res = self:request("GET", "/api/v1/system/cell")
    if res.status ~= 200 then
        error(("GET /api/v1/system/cell: %s %s"):format(res.status, res.body),
              2)
    end
    return res.json
end

-- The first number /metrics shows after a Lua pattern, or 0.
function _M:metric(pattern)
    local body = self:request("GET", "/metrics").body
    return tonumber(body:match(pattern)) or 0
end

-- The partitions of queue this broker holds, by name, and the messages
-- each holds ({} when it holds none): the depth read for a group never
-- seen, whose backlog is everything held (leased messages included).
function _M:held(queue)
    local res = self:depth(queue, "held-by-a-group-never-seen")
    if res.status == 404 then return {} end
    assert(res.status == 200, res.body)
    local parts = {}
    for _, p in ipairs(res.json.partitions) do
        parts[p.partition] = p.pending
    end
    return parts
end

-- n partitions ("p-1", "p-2", ...) of queue that the broker owner holds,
-- by the placement view via gives the identity headers name (ephd.placement,
-- the cell's own hash).
function _M:owned_partitions(owner, queue, n, headers)
    local placement = require("ephd.placement")
    local res = self:request("GET", "/api/v1/ephemeral/cell", nil, headers)
    assert(res.status == 200, res.body)
    local view = res.json
    for _, m in ipairs(view.members) do m.id = placement.id(m.id) end
    local address = "http://127.0.0.1:" .. owner.port
    local parts = {}
    for i = 1, 500 do
        local p = "p-" .. i
        if placement.owner(view.members, view.tenant, queue, p).address
                == address then
            parts[#parts + 1] = p
            if #parts == n then return parts end
        end
    end
    error("too few partitions of " .. queue .. " on " .. address, 2)
end

-- n brokers on the test database, each with env: a cell once
-- await_cell says so. The test stops them (stop_all in its finally: busted
-- keeps only the last finally a test registers, so a helper must not).
function _M.start_cell(n, env)
    local ds = {}
    for i = 1, n do ds[i] = _M.start({ db = true, env = env }) end
    return ds
end

function _M.stop_all(ds)
    for _, d in ipairs(ds) do d:stop() end
end

-- Polls until every broker of ds sees exactly the ids of ds as live.
function _M.await_cell(ds, seconds)
    local ids = {}
    for _, d in ipairs(ds) do ids[d:cell().self.id] = true end
    local function settled(d)
        local v = d:cell()
        if v.live ~= #ds then return false end
        for _, m in ipairs(v.members) do
            if m.live and not ids[m.id] then return false end
        end
        return true
    end
    local t0 = _M.now()
    for _, d in ipairs(ds) do
        while not settled(d) and _M.now() - t0 < seconds do
            socket.sleep(0.05)
        end
        if not settled(d) then error("the cell did not settle", 2) end
    end
end

_M.sleep = socket.sleep
_M.now = socket.gettime

-- Waiting for a state, as Kong's helpers.wait_until: polls cond() every
-- `step` seconds (0.05) for up to `seconds` (10) and returns its first
-- truthy value, or fails naming `what` (a string, or a function saying it
-- with the last value seen). A fixed sleep waits too long on an idle
-- machine and too short on a loaded one: keep one only where a test is
-- about elapsed time (a TTL, a lease, a rate's refill), and say so there.
function _M.wait_until(what, cond, seconds, step)
    local deadline = socket.gettime() + (seconds or 10)
    while true do
        local v = cond()
        if v then return v end
        if socket.gettime() > deadline then
            if type(what) == "function" then what = what() end
            error(("waited %g s for %s"):format(seconds or 10, what), 2)
        end
        socket.sleep(step or 0.05)
    end
end

-- Waits until pred(value) holds for the first number /metrics shows
-- after `pattern` (see metric); pred may be a number to equal. Returns
-- the value.
function _M:await_metric(pattern, pred, seconds)
    local want, v = pred, nil
    if type(pred) == "number" then pred = function(x) return x == want end end
    _M.wait_until(function()
        return ("%s on :%d to be %s (last %s)"):format(pattern, self.port,
                                                      tostring(want), v)
    end, function()
        v = self:metric(pattern)
        return pred(v)
    end, seconds)
    return v
end

local PARKED = "\nqueen_ephemeral_parked_polls (%d+)"

-- The long polls parked here, and waiting until there are n of them.
function _M:parked() return self:metric(PARKED) end
function _M:await_parked(n, seconds)
    return self:await_metric(PARKED, n, seconds)
end

-- Waits until the process is gone (after a signal the test sent).
function _M:await_exit(seconds)
    _M.wait_until("ephd " .. self.pid .. " to exit",
                  function() return not self:alive() end, seconds, 0.01)
end

-- Waits until the broker has done what it was given, for a state no one
-- series names (a connection it stopped reading, answers it stopped
-- writing): two scrapes of /metrics `quiet` seconds (0.1) apart alike, but
-- for the scrapes' own series.
function _M:await_settled(seconds, quiet)
    local last
    _M.wait_until("the broker on :" .. self.port .. " to settle", function()
        local now = self:request("GET", "/metrics").body
            :gsub('[^\n]*route="metrics"[^\n]*\n', "")
        local same = now == last
        last = now
        return same
    end, seconds, quiet or 0.1)
end

return _M
