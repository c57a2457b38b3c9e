-- The memory two hostile clients can make the broker hold, as resident
-- size: unparsed input streamed behind a parked pop, and pipelined
-- answers a client never reads. Prints one line per attack.
--   luajit bench/hostile.lua [build-dir] [MiB streamed] [requests]
-- (package.path must reach luasocket; run from the source tree)
local socket = require("socket")

local build = arg[1] or "build"
local stream_mib = tonumber(arg[2]) or 512
local pipelined = tonumber(arg[3]) or 20000

local function free_port()
    local s = assert(socket.bind("127.0.0.1", 0))
    local _, port = s:getsockname()
    s:close()
    return tonumber(port)
end

local function start()
    local port = free_port()
    local p = io.popen(("%s/ephd --listen 127.0.0.1:%d >/dev/null 2>&1 & "
                        .. "echo $!"):format(build, port))
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

-- A daemon of its own per attack, so neither inherits the other's heap.
for _, attack in ipairs({ behind_parked_pop, unread_answers }) do
    local pid, port = start()
    attack(pid, port)
    os.execute("kill -TERM " .. pid)
end
