-- The memory hostile clients can make the broker hold, as resident size:
-- unparsed input streamed behind a parked pop, pipelined answers a client
-- never reads, names chosen by pops under a 64 MiB cell, and a million
-- one-byte messages (what the cell counts against what they cost). Prints
-- one line per attack; docs/reliability.md has the figures.
--   luajit bench/hostile.lua [build-dir] [MiB streamed] [requests]
-- (package.path must reach luasocket; run from the source tree)
local socket = require("socket")
-- The answer reader (a long queue list is chunked).
package.path = "lua/?.lua;" .. package.path
local client = require("ephd.client")

local build = arg[1] or "build"
local stream_mib = tonumber(arg[2]) or 512
local pipelined = tonumber(arg[3]) or 20000

local function free_port()
    local s = assert(socket.bind("127.0.0.1", 0))
    local _, port = s:getsockname()
    s:close()
    return tonumber(port)
end

local function start(env)
    local port = free_port()
    local p = io.popen(("%s %s/ephd --listen 127.0.0.1:%d >/dev/null 2>&1 & "
                        .. "echo $!"):format(env or "", build, port))
    local pid = tonumber(p:read("*l"))
    p:close()
    for _ = 1, 500 do
        local c = socket.connect("127.0.0.1", port)
        if c then c:close() return pid, port end
        socket.sleep(0.01)
    end
    error("ephd did not start")
end

local function rss_mib(pid)
    local f = assert(io.open("/proc/" .. pid .. "/status"))
    local kib = tonumber(f:read("*a"):match("VmRSS:%s+(%d+)"))
    f:close()
    return kib / 1024
end

local function connect(port)
    local s = assert(socket.connect("127.0.0.1", port))
    s:setoption("tcp-nodelay", true)
    return s
end

-- Attack 1: a parked pop, then bytes the broker cannot parse yet. The
-- client writes as fast as the broker takes; a write that cannot finish
-- in a second means the broker stopped reading.
local function behind_parked_pop(pid, port)
    local before = rss_mib(pid)
    local s = connect(port)
    s:send("GET /api/v1/ephemeral/pop?queue=q&wait=true&timeout=300000 "
           .. "HTTP/1.1\r\nHost: x\r\n\r\n")
    local chunk = ("x"):rep(1048576)
    local sent = 0
    s:settimeout(1)
    for _ = 1, stream_mib do
        local n, err, partial = s:send(chunk)
        sent = sent + (n or partial or 0)
        if not n then break end
    end
    socket.sleep(0.2)
    local after = rss_mib(pid)
    print(("behind a parked pop: %.0f MiB sent, %d MiB asked; rss %.1f -> "
           .. "%.1f MiB"):format(sent / 1048576, stream_mib, before, after))
    s:close()
end

-- Attack 2: pipelined GET /dashboard on 8 connections that never read.
local function unread_answers(pid, port)
    local before = rss_mib(pid)
    local req = "GET /dashboard HTTP/1.1\r\nHost: x\r\n\r\n"
    local per = math.floor(pipelined / 8)
    local conns = {}
    for i = 1, 8 do
        local s = connect(port)
        s:settimeout(1)
        s:send(req:rep(per))
        conns[i] = s
    end
    socket.sleep(1)
    local after = rss_mib(pid)
    print(("%d GET /dashboard pipelined on 8 unread connections: rss %.1f "
           .. "-> %.1f MiB"):format(per * 8, before, after))
    for _, s in ipairs(conns) do s:close() end
end

-- One request at a time on s; the answer's status.
local function exchange(s, method, path, body)
    local head = method .. " " .. path .. " HTTP/1.1\r\nHost: x\r\n"
    if body then
        head = head .. "Content-Type: application/json\r\nContent-Length: "
               .. #body .. "\r\n"
    end
    assert(s:send(head .. "\r\n" .. (body or "")))
    local status, _, text = client.read_response(s)
    return assert(status, _), text
end

local function cell_mib(s)
    local _, listing = exchange(s, "GET", "/api/v1/ephemeral/queues")
    return tonumber(listing:match('"cellBytes":(%d+)')) / 1048576
end

-- Attack 3: pops naming 64 groups and 10,000 partitions in each of two
-- queues, under a 64 MiB cell: every name is a ring, a cursor per group
-- in each ring, and their names.
local function names(pid, port)
    local before = rss_mib(pid)
    local s = connect(port)
    local answered, refused = 0, 0
    local function pop(query)
        if exchange(s, "GET", "/api/v1/ephemeral/pop?" .. query) == 200 then
            answered = answered + 1
        else
            refused = refused + 1
        end
    end
    for q = 1, 2 do
        for g = 1, 64 do pop(("queue=q%d&group=g%d"):format(q, g)) end
        for p = 1, 10000 do pop(("queue=q%d&partition=p%d"):format(q, p)) end
    end
    print(("names by pops under a 64 MiB cell: %d answered, %d refused; "
           .. "cell counts %.1f MiB; rss %.1f -> %.1f MiB")
          :format(answered, refused, cell_mib(s), before, rss_mib(pid)))
    s:close()
end

-- Attack 4: a million one-byte messages, a thousand per push.
local function small_messages(pid, port)
    local before = rss_mib(pid)
    local s = connect(port)
    local body = '{"queue":"m","messages":['
                 .. ('{"payload":1},'):rep(999) .. '{"payload":1}]}'
    for _ = 1, 1000 do
        assert(exchange(s, "POST", "/api/v1/ephemeral/push", body) == 201)
    end
    print(("1,000,000 one-byte messages: cell counts %.1f MiB; rss %.1f -> "
           .. "%.1f MiB"):format(cell_mib(s), before, rss_mib(pid)))
    s:close()
end

-- A daemon of its own per attack, so none inherits another's heap.
local NO_RATE = "QUEEN_EPHEMERAL_RATE=0"
for _, attack in ipairs({
    { behind_parked_pop }, { unread_answers },
    { names, NO_RATE .. " QUEEN_EPHEMERAL_MAX_BYTES=67108864" },
    { small_messages, NO_RATE .. " QUEEN_EPHEMERAL_MAX_BYTES=4000000000"
      .. " QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH=2000000" },
}) do
    local pid, port = start(attack[2])
    attack[1](pid, port)
    os.execute("kill -TERM " .. pid)
end
