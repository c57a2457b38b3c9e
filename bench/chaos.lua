-- The cell's books (run by bench/chaos): a 3-broker cell on one private
-- PostgreSQL, a bounded push/pop/ack workload over 16 partitions and two
-- consumer groups through random brokers, one fault per scenario, then a
-- drain of every group through every broker and an account of every
-- message. Everything runs in one process: coroutines over non-blocking
-- sockets, so every answer is written down in the order it was read and a
-- slow machine changes the figures, never the books.
--
-- What is written down: every push (its payloads, partition, broker and
-- answer: 201 or the refusal's code), every delivery (id, group,
-- partition, payload, broker, and when its pop was sent and answered) and
-- every ack outcome; bench/chaos_books.lua judges them (lost, allowed,
-- phantom, duplicates by cause). A scenario's own verdict: pg-down fails
-- when any member left a view (the cell split). docs/reliability.md has
-- the workload, the faults and the figures.
--
-- Usage: see usage() below, or bench/chaos --help.
local socket = require("socket")
local cjson = require("cjson")
local books_judge = require("chaos_books").judge

local now = socket.gettime

local function usage(code)
    io.stderr:write([[
bench/chaos [options] [SCENARIO...]
  scenarios: none rolling rolling-gap two-term join kill9 sigstop pg-down
             (default: all; --short: rolling two-term join kill9 pg-down)
  --short            a CI-sized run: 8 s of load, the subset above
  --repeat N         runs of each scenario (default 1, 3 without --short)
  --duration S       seconds of load at least (default 20, 8 with --short);
                     the load goes on until the fault is over
  --rate N           messages pushed per second (default 500)
  --seed N           random seed (default: the time); run k uses seed + k
  --pg-down S        seconds PostgreSQL is down in pg-down (default 10,
                     5 with --short)
  --ttl-ms N         QUEEN_EPHEMERAL_MEMBER_TTL_MS (default 2000)
  --lease-s N        QUEEN_EPHEMERAL_LEASE_S (default 2)
  --report DIR       where the JSON reports and broker logs go
                     (default $EPHD_BUILD_DIR/chaos)
]])
    os.exit(code)
end

-- Set by bench/chaos.
local ROOT = os.getenv("CHAOS_ROOT")
local BUILD = os.getenv("CHAOS_BUILD") or "build"
local PG_DIR = os.getenv("CHAOS_PG_DIR")
local DB_URL = os.getenv("CHAOS_DB_URL")
local PIDS = os.getenv("CHAOS_PIDS") -- each broker's pid, for the wrapper

local ALL = { "none", "rolling", "rolling-gap", "two-term", "join", "kill9",
              "sigstop", "pg-down" }
local SHORT = { "rolling", "two-term", "join", "kill9", "pg-down" }

local opt = { rate = 500, ttl_ms = 2000, lease_s = 2,
              seed = math.floor(now()) % 100000 }
local chosen = {}
do
    local i = 1
    local function value()
        i = i + 1
        return arg[i] or usage(2)
    end
    while arg[i] do
        local a = arg[i]
        if a == "--short" then opt.short = true
        elseif a == "--repeat" then opt["repeat"] = tonumber(value())
        elseif a == "--duration" then opt.duration = tonumber(value())
        elseif a == "--rate" then opt.rate = tonumber(value())
        elseif a == "--seed" then opt.seed = tonumber(value())
        elseif a == "--pg-down" then opt.pg_down = tonumber(value())
        elseif a == "--ttl-ms" then opt.ttl_ms = tonumber(value())
        elseif a == "--lease-s" then opt.lease_s = tonumber(value())
        elseif a == "--report" then opt.report = value()
        elseif a == "--help" or a == "-h" then usage(0)
        elseif a:sub(1, 1) == "-" then usage(2)
        else chosen[#chosen + 1] = a end
        i = i + 1
    end
    for _, k in ipairs({ "rate", "seed", "ttl_ms", "lease_s" }) do
        if opt[k] == nil then usage(2) end
    end
    opt.duration = opt.duration or (opt.short and 8 or 20)
    opt.pg_down = opt.pg_down or (opt.short and 5 or 10)
    opt["repeat"] = opt["repeat"] or (opt.short and 1 or 3)
    opt.report = opt.report or (BUILD .. "/chaos")
    if not (ROOT and PG_DIR and DB_URL) then
        io.stderr:write("bench/chaos.lua: run bench/chaos\n")
        os.exit(2)
    end
    if #chosen == 0 then chosen = opt.short and SHORT or ALL end
    local known = {}
    for _, s in ipairs(ALL) do known[s] = true end
    for _, s in ipairs(chosen) do
        if not known[s] then
            io.stderr:write("bench/chaos: no scenario ", s, "\n")
            usage(2)
        end
    end
end

local PARTITIONS = 16
local GROUPS = { "g1", "g2" }
-- Consumers per group: g2 reads slower, so its places lag g1's and a
-- broker that frees what it thinks every group has read shows it.
local CONSUMERS = { g1 = 3, g2 = 2 }
local PRODUCERS = 4
local TOKEN = "chaos-cell-token-0123456789abcdef0123456789"
local REQUEST_S = 20 -- a request's deadline at the client

------------------------------------------------------------------------
-- The scheduler: a coroutine yields ("read"|"write", sock, deadline) or
-- ("sleep", nil, deadline) and is resumed with "ok" or "timeout".

local waiting = {} -- co -> { kind, sock, deadline }
local runnable = {}

local function spawn(fn, ...)
    local args = { ... }
    local co = coroutine.create(function() return fn(unpack(args)) end)
    runnable[#runnable + 1] = { co, "ok" }
    return co
end

local function step(co, why)
    local ok, kind, sock, deadline = coroutine.resume(co, why)
    if not ok then
        error(debug.traceback(co, kind), 0)
    end
    if coroutine.status(co) ~= "dead" then
        waiting[co] = { kind, sock, deadline }
    end
end

-- Runs until every coroutine has finished.
local function run_all()
    while true do
        while #runnable > 0 do
            local r = table.remove(runnable, 1)
            step(r[1], r[2])
        end
        if next(waiting) == nil then return end
        local rd, wr, soonest = {}, {}, math.huge
        for _, w in pairs(waiting) do
            if w[1] == "read" then rd[#rd + 1] = w[2]
            elseif w[1] == "write" then wr[#wr + 1] = w[2] end
            if w[3] < soonest then soonest = w[3] end
        end
        local t = math.max(0, math.min(soonest - now(), 0.5))
        local r, w = socket.select(rd, wr, t)
        local t1 = now()
        for co, x in pairs(waiting) do
            local why
            if (x[1] == "read" and r[x[2]]) or (x[1] == "write" and w[x[2]]) then
                why = "ok"
            elseif x[3] <= t1 then
                why = x[1] == "sleep" and "ok" or "timeout"
            end
            if why then
                waiting[co] = nil
                runnable[#runnable + 1] = { co, why }
            end
        end
    end
end

local function sleep(s)
    coroutine.yield("sleep", nil, now() + s)
end

local function wait_io(kind, sock, deadline)
    return coroutine.yield(kind, sock, deadline)
end

-- Runs a shell command without blocking the others; returns its status.
local seq_file = 0
local function sh(cmd)
    seq_file = seq_file + 1
    local done = ("%s/.sh-%d-%d"):format(opt.report, os.time(), seq_file)
    os.execute(("(%s) >/dev/null 2>&1; echo $? > %s.tmp; mv %s.tmp %s &")
               :format(cmd, done, done, done))
    while true do
        local f = io.open(done)
        if f then
            local rc = tonumber(f:read("*l"))
            f:close()
            os.remove(done)
            return rc
        end
        sleep(0.05)
    end
end

-- Waits for cond() with a deadline; returns its value or nil.
local function wait_for(cond, seconds, step_s)
    local deadline = now() + seconds
    while true do
        local v = cond()
        if v then return v end
        if now() > deadline then return nil end
        sleep(step_s or 0.1)
    end
end

------------------------------------------------------------------------
-- HTTP/1.1 over non-blocking sockets, keep-alive, Content-Length bodies.

local Conn = {}
Conn.__index = Conn

local function connect(port, deadline)
    local s = socket.tcp()
    s:settimeout(0)
    local ok, err = s:connect("127.0.0.1", port)
    if not ok and err == "timeout" then
        if wait_io("write", s, deadline) == "timeout" then
            s:close()
            return nil, "connect_timeout"
        end
        ok, err = s:connect("127.0.0.1", port)
        if not ok and err == "already connected" then ok = true end
    end
    if not ok then
        s:close()
        return nil, "connect:" .. tostring(err)
    end
    s:setoption("tcp-nodelay", true)
    return setmetatable({ sock = s, buf = "", port = port }, Conn)
end

function Conn:close()
    if self.sock then self.sock:close() end
    self.sock = nil
end

-- One exchange; returns status, body (decoded JSON or nil), raw body, or
-- nil and the transport's failure.
function Conn:exchange(raw, deadline)
    local s = self.sock
    local i = 1
    while i <= #raw do
        local last, err, partial = s:send(raw, i)
        if last then
            i = last + 1
        elseif err == "timeout" then
            i = partial + 1
            if i <= #raw and wait_io("write", s, deadline) == "timeout" then
                return nil, "send_timeout"
            end
        else
            return nil, "send:" .. err
        end
    end
    local buf = self.buf
    local head_end, status, len
    while true do
        if not head_end then
            head_end = buf:find("\r\n\r\n", 1, true)
            if head_end then
                local head = buf:sub(1, head_end - 1)
                status = tonumber(head:match("^HTTP/1%.%d (%d%d%d)"))
                len = tonumber(head:lower():match("\ncontent%-length:%s*(%d+)"))
                if not status or not len then
                    return nil, "bad_response"
                end
                self.close_after = head:lower():find("\nconnection:%s*close")
            end
        end
        if head_end and #buf >= head_end + 3 + len then
            local body = buf:sub(head_end + 4, head_end + 3 + len)
            self.buf = buf:sub(head_end + 4 + len)
            local okj, json = pcall(cjson.decode, body)
            return status, okj and json or nil, body
        end
        local data, err, partial = s:receive(65536)
        data = data or partial
        if data and #data > 0 then
            buf = buf .. data
        elseif err == "timeout" then
            if wait_io("read", s, deadline) == "timeout" then
                return nil, "answer_timeout"
            end
        else
            return nil, "recv:" .. tostring(err)
        end
    end
end

local function format(method, path, body)
    local h = method .. " " .. path .. " HTTP/1.1\r\nHost: chaos\r\n"
    if body then
        h = h .. "Content-Type: application/json\r\nContent-Length: " .. #body
            .. "\r\n"
    end
    return h .. "\r\n" .. (body or "")
end

-- A client: one keep-alive connection per broker, reopened after any
-- failure and when the broker was restarted (as a load balancer would
-- drop its pool). request() returns status, json, raw or nil, failure.
local function new_client()
    local conns = {}
    local c = {}
    function c.request(b, method, path, body, wait_s)
        local port = b.port
        local deadline = now() + REQUEST_S + (wait_s or 0)
        local conn = conns[port]
        if conn and conn.incarnation ~= b.incarnation then
            conn:close()
            conn = nil
        end
        if not conn then
            local err
            conn, err = connect(port, deadline)
            if not conn then return nil, err end
            conn.incarnation = b.incarnation
            conns[port] = conn
        end
        local status, json, raw = conn:exchange(format(method, path, body),
                                                deadline)
        if not status or conn.close_after then
            conn:close()
            conns[port] = nil
        end
        return status, json, raw
    end
    function c.close()
        for _, conn in pairs(conns) do conn:close() end
    end
    return c
end

------------------------------------------------------------------------
-- The cell: brokers started as spec/e2e/daemon.lua starts them.

local function free_port()
    local p = io.popen(ROOT .. "/scripts/free-port 2>&1")
    local out = p:read("*a")
    p:close()
    return tonumber(out) or error("scripts/free-port: " .. out)
end

local function shell_quote(s)
    return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function psql(statement)
    local p = io.popen("psql " .. shell_quote(DB_URL) .. " -XAtq -c "
                       .. shell_quote(statement) .. " 2>&1")
    local out = p:read("*a")
    p:close()
    return out
end

-- A request of the harness's own (views, depths), on a connection of its
-- own, so coroutines never share one.
local function admin(b, method, path)
    local c = new_client()
    local status, json = c.request(b, method, path)
    c.close()
    return status, json
end

local Broker = {}
Broker.__index = Broker

local function broker_env()
    return {
        QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
        QUEEN_EPHEMERAL_MEMBER_TTL_MS = opt.ttl_ms,
        QUEEN_EPHEMERAL_LEASE_S = opt.lease_s,
        -- No message is dropped for its attempts: a hand-over counts a
        -- lease as an attempt, and a drop would read as a loss.
        QUEEN_EPHEMERAL_RETRY_LIMIT = 1000,
        QUEEN_EPHEMERAL_RATE = 0,
        QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = 1000000,
        QUEEN_EPHEMERAL_IMPLICIT_IDLE_S = 86400,
    }
end

-- Starts (or restarts, on the same port) a broker; waits until it listens.
function Broker:start()
    local env = {}
    for k, v in pairs(broker_env()) do
        env[#env + 1] = k .. "=" .. shell_quote(v)
    end
    self.incarnation = (self.incarnation or 0) + 1
    local log = ("%s/%s.log"):format(self.dir, self.name)
    local cmd = ("%s %s/ephd --listen 127.0.0.1:%d --database-url %s"
                 .. " >>%s 2>&1 & echo $!")
        :format(table.concat(env, " "), BUILD, self.port, shell_quote(DB_URL),
                log)
    self.log = log
    local p = io.popen(cmd)
    self.pid = tonumber(p:read("*l"))
    p:close()
    if PIDS then
        local f = assert(io.open(PIDS, "a"))
        f:write(self.pid, " ", self.port, "\n")
        f:close()
    end
    self.state = "starting"
    local up = wait_for(function()
        if not self:alive() then return "dead" end
        local c = connect(self.port, now() + 1)
        if c then c:close() return "up" end
    end, 30, 0.02)
    if up ~= "up" then error("broker " .. self.name .. " did not start") end
    self.state = "up"
end

function Broker:alive()
    local f = io.open("/proc/" .. self.pid .. "/stat")
    if not f then return false end
    local stat = f:read("*l") or ""
    f:close()
    return not stat:find("^%d+ %b() Z")
end

function Broker:signal(sig)
    os.execute("kill -" .. sig .. " " .. self.pid .. " 2>/dev/null")
end

-- SIGTERM, then waits for the exit (the hand-over's deadline and more).
function Broker:term()
    self.state = "stopping"
    self:signal("TERM")
    if not wait_for(function() return not self:alive() end, 60, 0.02) then
        self:signal("KILL")
        error("broker " .. self.name .. " did not stop within 60 s")
    end
    self.state = "down"
end

function Broker:view()
    local status, json = admin(self, "GET", "/api/v1/system/cell")
    if status == 200 then return json end
end

-- The partitions of the queue this broker holds (depth for a group never
-- seen: everything held), as spec/e2e/daemon.lua's held().
function Broker:held(queue)
    local status, json = admin(self, "GET",
        "/api/v1/ephemeral/queues/" .. queue
        .. "/depth?group=held-by-a-group-never-seen")
    local parts = {}
    if status == 200 then
        for _, p in ipairs(json.partitions) do parts[p.partition] = p.pending end
    end
    return parts
end

-- Counts of the log's events of interest.
function Broker:events()
    local f = io.open(self.log)
    local text = f and f:read("*a") or ""
    if f then f:close() end
    local counts = {}
    for line in text:gmatch("[^\n]+") do
        local ev = line:match(" event=([%w_]+)")
        if ev then
            counts[ev] = (counts[ev] or 0) + 1
            -- A member judged dead (past its TTL) or gone (its row deleted).
            local why = ev == "member_left" and line:match(" reason=(%w+)")
            if why then
                ev = ev .. "_" .. why
                counts[ev] = (counts[ev] or 0) + 1
            end
        end
    end
    return counts
end

------------------------------------------------------------------------
-- One run of one scenario.

local function run_scenario(scenario, k, seed)
    math.randomseed(seed)
    local dir = ("%s/%s-%d"):format(opt.report, scenario, k)
    os.execute("rm -rf " .. shell_quote(dir) .. " && mkdir -p "
               .. shell_quote(dir))
    -- A killed broker's row is left behind; every run starts from none.
    psql("DELETE FROM queen.ephemeral_members")
    local queue = ("chaos-%d-%s-%d"):format(seed, scenario, k)
    local brokers = {}
    local function add_broker()
        local b = setmetatable({ name = "b" .. (#brokers + 1),
                                 port = free_port(), dir = dir }, Broker)
        brokers[#brokers + 1] = b
        b:start()
        return b
    end
    local function up()
        local list = {}
        for _, b in ipairs(brokers) do
            if b.state == "up" then list[#list + 1] = b end
        end
        return list
    end
    local function any_up()
        local list = up()
        return list[math.random(#list)]
    end
    -- Every broker up sees exactly the brokers up as live, freshly.
    local function settled()
        local list = up()
        local ids = {}
        for _, b in ipairs(list) do
            local v = b:view()
            if not v then return false end
            ids[#ids + 1] = v.self.id
        end
        for _, b in ipairs(list) do
            local v = b:view()
            if not v or not v.fresh or v.live ~= #list then return false end
            local live = {}
            for _, m in ipairs(v.members) do
                if m.live then live[m.id] = true end
            end
            for _, id in ipairs(ids) do
                if not live[id] then return false end
            end
        end
        return true
    end

    local books = {
        pushes = {},         -- { first, n, partition, broker, status, code, t0, t1 }
        payload_push = {},   -- payload -> push index
        deliveries = {},     -- { payload, id, group, partition, broker, attempts, t0, t1, ack }
        errors = {},         -- "route code" -> count
        error_texts = {},    -- "route code" -> { "broker: text" -> count }
        fault = { scenario = scenario },
    }
    -- An error's count by route and code, and its distinct texts with the
    -- broker that answered, so a report says why a client saw it.
    local function count_error(route, code, json, b)
        local key = route .. " " .. code
        books.errors[key] = (books.errors[key] or 0) + 1
        local text = type(json) == "table" and json.error
        if text then
            local texts = books.error_texts[key] or {}
            books.error_texts[key] = texts
            local t = b.name .. ": " .. text
            texts[t] = (texts[t] or 0) + 1
        end
    end

    local t_start = now()
    local pushed_msgs, next_payload = 0, 1
    local fault_done = false
    local load_done = false
    local failures = {} -- errors of the harness itself

    -- The fault, run beside the load a quarter into its duration.
    local function fault()
        wait_for(function()
            return now() - t_start >= opt.duration / 4
        end, opt.duration, 0.05)
        local f = books.fault
        f.t0 = now() - t_start
        local function restart(b, gap)
            b:term()
            if gap then sleep(gap) end
            b:start()
            if not wait_for(settled, 60, 0.1) then
                failures[#failures + 1] = "the cell did not settle after "
                                          .. b.name .. " restarted"
            end
        end
        if scenario == "rolling" or scenario == "rolling-gap" then
            for i = 1, 3 do
                restart(brokers[i], scenario == "rolling-gap" and 2 or nil)
            end
        elseif scenario == "two-term" then
            local a, b = brokers[1], brokers[2]
            a.state, b.state = "stopping", "stopping"
            local done = 0
            spawn(function() a:term() done = done + 1 end)
            spawn(function() b:term() done = done + 1 end)
            wait_for(function() return done == 2 end, 120, 0.05)
            a:start()
            b:start()
            if not wait_for(settled, 60, 0.1) then
                failures[#failures + 1] = "the cell did not settle"
            end
        elseif scenario == "join" then
            add_broker()
            if not wait_for(settled, 60, 0.1) then
                failures[#failures + 1] = "the cell did not settle"
            end
        elseif scenario == "kill9" then
            local victim = brokers[2]
            victim.state = "down"
            local held = victim:held(queue)
            victim:signal("KILL")
            wait_for(function() return not victim:alive() end, 30, 0.02)
            f.victim = victim.name
            f.victim_partitions = {}
            for p in pairs(held) do
                f.victim_partitions[#f.victim_partitions + 1] = p
            end
            f.killed_at = now()
            -- The survivors drop it after its TTL; then it comes back.
            if not wait_for(settled, 60, 0.1) then
                failures[#failures + 1] = "the survivors did not drop the victim"
            end
            f.healed_s = now() - f.killed_at
            victim:start()
            if not wait_for(settled, 60, 0.1) then
                failures[#failures + 1] = "the cell did not settle"
            end
        elseif scenario == "sigstop" then
            local victim = brokers[2]
            victim.state = "stopped"
            victim:signal("STOP")
            f.victim = victim.name
            if not wait_for(settled, 60, 0.1) then
                failures[#failures + 1] = "the others did not drop the stopped broker"
            end
            victim:signal("CONT")
            victim.state = "up"
            if not wait_for(settled, 60, 0.1) then
                failures[#failures + 1] = "the cell did not settle"
            end
        elseif scenario == "pg-down" then
            sh(ROOT .. "/scripts/pg.sh stop " .. shell_quote(PG_DIR))
            sleep(opt.pg_down)
            sh(ROOT .. "/scripts/pg.sh start " .. shell_quote(PG_DIR))
            if not wait_for(settled, 60, 0.1) then
                failures[#failures + 1] = "the cell did not settle"
            end
        end
        f.t1 = now() - t_start
        fault_done = true
    end

    -- Producers: batches of 1-8 unique payloads to a random partition
    -- through a random broker, at opt.rate messages a second in all,
    -- until the duration has passed and the fault is over.
    local function producer()
        local cl = new_client()
        while not (fault_done and now() - t_start >= opt.duration) do
            local n = math.random(8)
            -- Paced: the n messages are due at pushed / rate.
            local due = t_start + pushed_msgs / opt.rate
            if due > now() then sleep(due - now()) end
            local first = next_payload
            next_payload = next_payload + n
            pushed_msgs = pushed_msgs + n
            local partition = "p" .. math.random(0, PARTITIONS - 1)
            local items = {}
            for j = 0, n - 1 do
                items[#items + 1] = '{"payload":' .. (first + j) .. '}'
            end
            local body = '{"queue":"' .. queue .. '","partition":"'
                         .. partition .. '","messages":['
                         .. table.concat(items, ",") .. ']}'
            local b = any_up()
            local rec = { first = first, n = n, partition = partition,
                          broker = b.name, t0 = now() }
            books.pushes[#books.pushes + 1] = rec
            for j = 0, n - 1 do books.payload_push[first + j] = #books.pushes end
            local status, json = cl.request(b, "POST",
                                            "/api/v1/ephemeral/push", body)
            rec.t1 = now()
            rec.status = status or 0
            if status ~= 201 then
                rec.code = status and (json and json.code or ("http_" .. status))
                           or ("transport:" .. json)
                count_error("push", rec.code, json, b)
            end
        end
        cl.close()
    end

    -- Acks a popped batch through a random broker: each id completed,
    -- except a few retried and a few left for their lease to expire.
    local function ack(cl, group, batch, b, drain)
        local items, recs = {}, {}
        for _, d in ipairs(batch) do
            local r = math.random()
            local status = "completed"
            if not drain and r < 0.03 then status = nil
            elseif not drain and r < 0.06 then status = "retry" end
            d.ack = { status = status or "none" }
            if status then
                items[#items + 1] = cjson.encode({ id = d.id, status = status })
                recs[#recs + 1] = d
            end
        end
        if #items == 0 then return end
        local body = '{"queue":"' .. queue .. '","group":"' .. group
                     .. '","acks":[' .. table.concat(items, ",") .. ']}'
        local t0 = now()
        local status, json = cl.request(b, "POST", "/api/v1/ephemeral/ack",
                                        body)
        local t1 = now()
        local code
        if status ~= 200 or type(json) ~= "table" or not json.results then
            code = status and (json and json.code or ("http_" .. status))
                   or ("transport:" .. json)
            count_error("ack", code, json, b)
        end
        for i, d in ipairs(recs) do
            d.ack.t0, d.ack.t1, d.ack.broker = t0, t1, b.name
            if code then
                d.ack.outcome = "failed:" .. code
            else
                local res = json.results[i]
                d.ack.outcome = res and res.id == d.id and res.outcome
                                or "mismatched"
            end
        end
    end

    -- One pop: records its deliveries, acks them; returns how many.
    local function pop_once(cl, group, partition, b, wait, drain)
        local path = "/api/v1/ephemeral/pop?queue=" .. queue .. "&partition="
                     .. partition .. "&group=" .. group .. "&batch="
                     .. (drain and 500 or 16)
                     .. (wait and "&wait=true&timeout=300" or "")
        local t0 = now()
        local status, json = cl.request(b, "GET", path, nil,
                                        wait and 1 or 0)
        local t1 = now()
        if status ~= 200 or type(json) ~= "table"
                or type(json.messages) ~= "table" then
            local code = status and (json and json.code or ("http_" .. status))
                         or ("transport:" .. json)
            count_error("pop", code, json, b)
            return 0, code
        end
        local batch = {}
        for _, m in ipairs(json.messages) do
            local d = { payload = m.payload, id = m.id, group = group,
                        partition = m.partition, broker = b.name,
                        attempts = m.attempts, t0 = t0, t1 = t1 }
            books.deliveries[#books.deliveries + 1] = d
            batch[#batch + 1] = d
        end
        if #batch > 0 then ack(cl, group, batch, any_up(), drain) end
        return #batch
    end

    local function consumer(group)
        local cl = new_client()
        while not load_done do
            local got, code = pop_once(cl, group,
                                       "p" .. math.random(0, PARTITIONS - 1),
                                       any_up(), true)
            if code then sleep(0.05) end
        end
        cl.close()
    end

    for _ = 1, 3 do add_broker() end
    if not wait_for(settled, 60, 0.1) then
        failures[#failures + 1] = "the cell did not form"
    end
    -- Every group pops every partition once before the first push: a
    -- broker frees a message once every group it knows has passed it, and
    -- a group it has never heard of is not owed what came before it.
    do
        local cl = new_client()
        for _, g in ipairs(GROUPS) do
            for p = 0, PARTITIONS - 1 do
                local status = cl.request(any_up(), "GET",
                    "/api/v1/ephemeral/pop?queue=" .. queue .. "&partition=p"
                    .. p .. "&group=" .. g)
                if status ~= 200 then
                    failures[#failures + 1] = "a group's first pop answered "
                                              .. tostring(status)
                end
            end
        end
        cl.close()
    end
    t_start = now()
    local workers = 0
    local function worker(fn, ...)
        workers = workers + 1
        spawn(function(...) fn(...) workers = workers - 1 end, ...)
    end
    worker(fault)
    for _ = 1, PRODUCERS do worker(producer) end
    spawn(function()
        wait_for(function() return workers == 0 end, 1e9, 0.1)
        load_done = true
    end)
    local consumers = 0
    for _, g in ipairs(GROUPS) do
        for _ = 1, CONSUMERS[g] do
            consumers = consumers + 1
            spawn(function() consumer(g) consumers = consumers - 1 end)
        end
    end
    wait_for(function() return load_done and consumers == 0 end, 1e9, 0.1)
    local t_load = now() - t_start

    -- The drain: every group through every broker, until every broker's
    -- depth for every group is 0 and a lease has passed since the last
    -- delivery (a lease left to expire comes back only then).
    local drained = false
    do
        if not wait_for(settled, 60, 0.1) then
            failures[#failures + 1] = "the cell did not settle for the drain"
        end
        local cl = new_client()
        local last = now()
        local deadline = now() + 120
        while now() < deadline do
            local got = 0
            for _, b in ipairs(up()) do
                for _, g in ipairs(GROUPS) do
                    for p = 0, PARTITIONS - 1 do
                        repeat
                            local n = pop_once(cl, g, "p" .. p, b, false, true)
                            got = got + n
                        until n == 0
                    end
                end
            end
            if got > 0 then last = now() end
            local pending = 0
            for _, b in ipairs(up()) do
                for _, g in ipairs(GROUPS) do
                    local status, json = admin(b, "GET",
                        "/api/v1/ephemeral/queues/" .. queue .. "/depth?group="
                        .. g)
                    if status == 200 then pending = pending + json.pending end
                end
            end
            if got == 0 and pending == 0 and now() - last > opt.lease_s + 1 then
                drained = true
                break
            end
            sleep(0.25)
        end
        cl.close()
    end
    if not drained then
        failures[#failures + 1] = "the drain did not empty the cell in 120 s"
    end

    -- Broker logs' events, then a clean stop of every broker.
    local events = {}
    for _, b in ipairs(brokers) do
        for ev, n in pairs(b:events()) do events[ev] = (events[ev] or 0) + n end
    end
    for _, b in ipairs(brokers) do
        if b.state == "stopped" then b:signal("CONT") end
        if b:alive() then b:term() end
    end

    -- The books.
    local r = books_judge(books, GROUPS, t_start)
    r.scenario, r.run, r.seed, r.queue = scenario, k, seed, queue
    r.load_s, r.fault, r.harness_failures = t_load, books.fault, failures
    r.events, r.errors, r.error_texts = events, books.errors, books.error_texts
    r.pushes, r.messages = #books.pushes, next_payload - 1
    -- The database going away is not the death of the members: a member
    -- left (judged unseen, or its row collected) while nobody stopped is
    -- the cell splitting.
    if scenario == "pg-down" and (events.member_left or 0) > 0 then
        r.violations.split = events.member_left
        r.violations_total = r.violations_total + events.member_left
    end
    r.pass = r.lost_total == 0 and r.violations_total == 0 and #failures == 0
    return r, dir
end

------------------------------------------------------------------------

local function summary(r)
    local errs = {}
    local keys = {}
    for key in pairs(r.errors) do keys[#keys + 1] = key end
    table.sort(keys)
    for _, key in ipairs(keys) do
        errs[#errs + 1] = key:gsub(" ", ":") .. "=" .. r.errors[key]
    end
    local dups = {}
    for kind, n in pairs(r.duplicates_allowed) do dups[#dups + 1] = kind .. "=" .. n end
    table.sort(dups)
    local viol = {}
    for kind, n in pairs(r.violations) do viol[#viol + 1] = kind .. "=" .. n end
    table.sort(viol)
    return ("chaos %-11s run=%d seed=%d %s messages=%d ok=%d refused=%d"
            .. " uncertain=%d delivered=g1:%d,g2:%d lost=g1:%d,g2:%d"
            .. " allowed=%d phantom=%d violations=%d[%s] dup_allowed=[%s]"
            .. " errors=[%s] wiped=%d handover_failed=%d left=%d load=%.0fs%s")
        :format(r.scenario, r.run, r.seed, r.pass and "PASS" or "FAIL",
                r.messages, r.answered_201, r.refused, r.uncertain,
                r.delivered.g1, r.delivered.g2, r.lost.g1, r.lost.g2,
                r.lost_allowed_total, r.phantom, r.violations_total,
                table.concat(viol, ","), table.concat(dups, ","),
                table.concat(errs, ","), r.events.partitions_wiped or 0,
                r.events.handover_failed or 0,
                r.events.member_left or 0, r.load_s,
                #r.harness_failures > 0
                    and (" harness=[" .. table.concat(r.harness_failures, "; ")
                         .. "]") or "")
end

os.execute("mkdir -p " .. shell_quote(opt.report))
local all_pass = true
local n = 0
for k = 1, opt["repeat"] do
    for _, scenario in ipairs(chosen) do
        n = n + 1
        local r, dir
        spawn(function() r, dir = run_scenario(scenario, k, opt.seed + n) end)
        run_all()
        local f = assert(io.open(dir .. "/report.json", "w"))
        f:write(cjson.encode(r), "\n")
        f:close()
        print(summary(r))
        io.stdout:flush()
        all_pass = all_pass and r.pass
    end
end
os.exit(all_pass and 0 or 1)
