-- A bounded mixed workload with accounting (run by bench/soak). Pushes
-- unique integer payloads to many queues; four groups consume them with a
-- mix of ack, fail, retry and leases left to expire; PostgreSQL restarts in
-- the middle. Beside them, churn queues keep queue-mode pops parked while
-- new groups appear on those queues and the queues are deleted (retiring
-- their groups) and re-created: every parked pop must be answered. Then it drains and proves conservation: for every group,
-- every message pushed was acked at least once or dropped for a retry, the
-- broker's retry drops match the client's books, nothing arrived that was
-- never pushed, and the broker's memory is back near its baseline.
local socket = require("socket")
local cjson = require("cjson")

local PORT = tonumber(arg[1])
local PID = arg[2]
local SECONDS = tonumber(arg[3] or 60)
local PG = arg[4] -- scripts/pg.sh data directory, restarted mid-run
local ROOT = arg[5] or "."
local QUEUES = tonumber(os.getenv("SOAK_QUEUES") or 1000)
local GROUPS = { "g1", "g2", "g3", "g4" }
local RETRY_LIMIT = 3
local CHURN_QUEUES = 4
local PARKED_PER_QUEUE = 3
local CHURN_GROUPS = 30 -- new groups on a churn queue before it is retired

math.randomseed(tonumber(os.getenv("SOAK_SEED") or 42))

local function rss()
    local f = io.open("/proc/" .. PID .. "/status")
    local t = f:read("*a")
    f:close()
    return tonumber(t:match("VmRSS:%s+(%d+)"))
end

-- One keep-alive connection, plain HTTP/1.1.
local conn = assert(socket.connect("127.0.0.1", PORT))
conn:setoption("tcp-nodelay", true)
conn:settimeout(30)

local function send(sock, method, path, body)
    local head = method .. " " .. path .. " HTTP/1.1\r\nHost: soak\r\n"
    if body then
        head = head .. "Content-Type: application/json\r\nContent-Length: "
               .. #body .. "\r\n"
    end
    assert(sock:send(head .. "\r\n" .. (body or "")))
end

local function receive(sock)
    local status = tonumber(assert(sock:receive("*l")):match(" (%d%d%d) "))
    local len = 0
    while true do
        local h = assert(sock:receive("*l"))
        if h == "" then break end
        local n = h:match("^[Cc]ontent%-[Ll]ength:%s*(%d+)")
        if n then len = tonumber(n) end
    end
    local text = len > 0 and assert(sock:receive(len)) or ""
    return status, text ~= "" and cjson.decode(text) or nil
end

local function request(method, path, body)
    send(conn, method, path, body)
    return receive(conn)
end

-- The churn: parked pops on their own connections, answered by pushes,
-- timeouts or the deletion of their queue, and parked again.
local churn = { parked = 0, answered = 0, delivered = 0, groups = 0,
                retired = 0 }
local parked_socks, churn_groups = {}, {}

local function park(sock, k)
    send(sock, "GET", "/api/v1/ephemeral/pop?queue=churn-" .. k
                      .. "&wait=true&timeout=2000&autoAck=true")
    churn.parked = churn.parked + 1
end

for k = 1, CHURN_QUEUES do
    churn_groups[k] = 0
    for _ = 1, PARKED_PER_QUEUE do
        local s = assert(socket.connect("127.0.0.1", PORT))
        s:settimeout(30)
        parked_socks[#parked_socks + 1] = s
        parked_socks[s] = k
        park(s, k)
    end
end

-- Reads the answers that have arrived and parks those pops again (or not,
-- at the end); waits up to wait seconds for the first.
local function reap(wait, again)
    local ready = socket.select(parked_socks, nil, wait)
    for _, s in ipairs(ready) do
        local status, res = receive(s)
        assert(status == 200, "parked pop answered " .. tostring(status))
        churn.answered = churn.answered + 1
        churn.delivered = churn.delivered + #res.messages
        if again then park(s, parked_socks[s]) end
    end
end

local function churn_step()
    local k = math.random(CHURN_QUEUES)
    local r = math.random()
    if r < 0.5 then
        churn.groups = churn.groups + 1
        churn_groups[k] = churn_groups[k] + 1
        local status = request("GET", "/api/v1/ephemeral/pop?queue=churn-" .. k
                                      .. "&group=c" .. churn.groups)
        assert(status == 200, "new group's pop answered " .. tostring(status))
    elseif r < 0.8 then
        local status = request("POST", "/api/v1/ephemeral/push",
            '{"queue":"churn-' .. k .. '","messages":[{"payload":0}]}')
        assert(status == 201, "churn push answered " .. tostring(status))
    end
    if churn_groups[k] >= CHURN_GROUPS then
        -- Retires the queue's groups with it; 503 while PostgreSQL is away.
        local status = request("DELETE", "/api/v1/ephemeral/queue/churn-" .. k)
        assert(status == 200 or status == 503,
               "churn delete answered " .. tostring(status))
        if status == 200 then
            churn_groups[k] = 0
            churn.retired = churn.retired + 1
        end
    end
    reap(0, true)
end

-- The books.
local pushed = {}       -- queue -> list of payload ids
local pushed_set = {}   -- id -> queue
local acked = {}        -- queue -> group -> id -> true
local dropped = {}      -- queue -> group -> id -> true (retry, as expected)
local phantom, next_id = 0, 1
local counts = { pushed = 0, delivered = 0, acked = 0, failed = 0,
                 retried = 0, expired = 0, retry_drops = 0,
                 configure_503 = 0, configure_201 = 0 }

local function qname(i) return "soak-" .. i end
for i = 1, QUEUES do
    pushed[qname(i)] = {}
    acked[qname(i)], dropped[qname(i)] = {}, {}
    for _, g in ipairs(GROUPS) do
        acked[qname(i)][g], dropped[qname(i)][g] = {}, {}
    end
end

-- Register every group before the first push: a group sees what is still
-- in memory when it arrives, and the books expect it to see everything.
for i = 1, QUEUES do
    for _, g in ipairs(GROUPS) do
        request("GET", "/api/v1/ephemeral/pop?queue=" .. qname(i)
                       .. "&group=" .. g .. "&batch=1")
    end
end

local function push_some()
    local q = qname(math.random(QUEUES))
    local n = math.random(1, 20)
    local msgs, ids = {}, {}
    for k = 1, n do
        ids[k] = next_id
        msgs[k] = '{"payload":' .. next_id .. '}'
        next_id = next_id + 1
    end
    local status = request("POST", "/api/v1/ephemeral/push",
        '{"queue":"' .. q .. '","messages":[' .. table.concat(msgs, ",")
        .. ']}')
    assert(status == 201, "push answered " .. tostring(status))
    for _, id in ipairs(ids) do
        local list = pushed[q]
        list[#list + 1] = id
        pushed_set[id] = q
    end
    counts.pushed = counts.pushed + n
end

-- Pops a batch for one (queue, group) and settles each delivery.
local function consume(q, g, all_ack)
    local status, res = request("GET", "/api/v1/ephemeral/pop?queue=" .. q
                                       .. "&group=" .. g .. "&batch=50")
    assert(status == 200, "pop answered " .. tostring(status))
    local acks, acked_ids = {}, {}
    for _, m in ipairs(res.messages) do
        counts.delivered = counts.delivered + 1
        local id = m.payload
        if pushed_set[id] ~= q then phantom = phantom + 1 end
        local last = m.attempts == RETRY_LIMIT - 1
        local r = all_ack and 0 or math.random()
        if r < 0.80 then
            acks[#acks + 1] = { id = m.id, status = "completed" }
            acked_ids[#acks] = id
            acked[q][g][id] = true
            counts.acked = counts.acked + 1
        elseif r < 0.90 or r < 0.95 then
            local st = r < 0.90 and "failed" or "retry"
            acks[#acks + 1] = { id = m.id, status = st }
            counts[st == "failed" and "failed" or "retried"] =
                counts[st == "failed" and "failed" or "retried"] + 1
            if last then dropped[q][g][id] = true end
        else
            -- Left to expire: redelivered after the lease, or dropped if it
            -- was the last allowed delivery.
            counts.expired = counts.expired + 1
            if last then dropped[q][g][id] = true end
        end
    end
    if #acks > 0 then
        local st, body = request("POST", "/api/v1/ephemeral/ack",
            cjson.encode({ queue = q, group = g, acks = acks }))
        assert(st == 200, "ack answered " .. tostring(st))
        for i, r in ipairs(body.results) do
            -- A lease can expire between pop and ack (a slow turn): then
            -- this ack settled nothing and the message comes back. Results
            -- follow acks, not the pop's messages (some were left to expire).
            if r.outcome == "unknown" and acked_ids[i] then
                acked[q][g][acked_ids[i]] = nil
            end
        end
    end
    return #res.messages
end

local baseline = rss()
local t0 = socket.gettime()
local restarted = false
while socket.gettime() - t0 < SECONDS do
    for _ = 1, 3 do push_some() end
    for _ = 1, 4 do
        consume(qname(math.random(QUEUES)), GROUPS[math.random(#GROUPS)])
    end
    churn_step()
    if not restarted and socket.gettime() - t0 > SECONDS / 2 and PG then
        -- PostgreSQL goes away and comes back; the hot path must not care.
        os.execute(ROOT .. "/scripts/pg.sh stop " .. PG)
        for k = 1, 20 do
            push_some()
            local st = request("POST", "/api/v1/ephemeral/configure",
                '{"queue":"soak-declared-' .. k .. '"}')
            if st == 503 then counts.configure_503 = counts.configure_503 + 1 end
        end
        os.execute(ROOT .. "/scripts/pg.sh start " .. PG .. " >/dev/null")
        restarted = true
    end
end
-- Every parked pop is answered within its timeout, and nothing is parked
-- again.
local reaped_at = socket.gettime()
while churn.answered < churn.parked and socket.gettime() - reaped_at < 10 do
    reap(1, false)
end
for _, s in ipairs(parked_socks) do s:close() end
for k = 1, CHURN_QUEUES do
    request("DELETE", "/api/v1/ephemeral/queue/churn-" .. k)
end

-- Heal: configure works again without a broker restart.
local healed_at = socket.gettime()
while socket.gettime() - healed_at < 15 do
    if request("POST", "/api/v1/ephemeral/configure",
               '{"queue":"soak-declared"}') == 201 then
        counts.configure_201 = counts.configure_201 + 1
        break
    end
    socket.sleep(0.2)
end
request("DELETE", "/api/v1/ephemeral/queue/soak-declared")
for k = 1, 20 do request("DELETE", "/api/v1/ephemeral/queue/soak-declared-" .. k) end

-- Drain: ack everything until no group of any queue has anything pending
-- (leases out on messages left to expire come back after a second).
local drain_start = socket.gettime()
while true do
    local busy = 0
    for i = 1, QUEUES do
        for _, g in ipairs(GROUPS) do
            while consume(qname(i), g, true) > 0 do busy = busy + 1 end
        end
    end
    local pending = 0
    for i = 1, QUEUES do
        local st, depth = request("GET", "/api/v1/ephemeral/queues/"
                                         .. qname(i) .. "/depth")
        assert(st == 200, "depth answered " .. tostring(st))
        do
            for _, g in ipairs(depth.groups) do pending = pending + g.pending end
        end
    end
    if pending == 0 then break end
    assert(socket.gettime() - drain_start < 120, "drain did not finish")
    socket.sleep(0.5)
end

-- The broker's own count of drops by cause: the tenant's, which outlives
-- queues collected after their drain.
local meter_status, meter = request("GET", "/api/v1/system/metering")
assert(meter_status == 200, "metering answered " .. tostring(meter_status))
local drops = meter.tenants[1].drops
local broker_retry = drops.retry

-- Conservation, per group.
local lost, both, expected_drops = 0, 0, 0
for q, ids in pairs(pushed) do
    for _, g in ipairs(GROUPS) do
        for _, id in ipairs(ids) do
            local a, d = acked[q][g][id], dropped[q][g][id]
            if d then expected_drops = expected_drops + 1 end
            if not a and not d then lost = lost + 1 end
            if a and d then both = both + 1 end
        end
    end
end

-- Memory: the queues are deleted (the idle time is kept long, see
-- bench/soak), and the broker gives memory back after a quiet second.
for i = 1, QUEUES do
    assert(request("DELETE", "/api/v1/ephemeral/queue/" .. qname(i)) == 200)
end
socket.sleep(3)
local after = rss()

local report = {
    seconds = SECONDS, queues = QUEUES, groups = #GROUPS,
    pushed = counts.pushed, delivered = counts.delivered,
    acked = counts.acked, failed = counts.failed, retried = counts.retried,
    expired = counts.expired,
    drops = drops, churn = churn,
    client_expected_retry_drops = expected_drops,
    lost = lost, acked_and_dropped = both, phantom = phantom,
    pg_restart = { configure_503 = counts.configure_503,
                   healed = counts.configure_201 > 0 },
    rss_kib = { baseline = baseline, after = after },
}
print(cjson.encode(report))
local ok = lost == 0 and phantom == 0 and both == 0
           and churn.answered == churn.parked and churn.retired > 0
           and broker_retry == expected_drops
           and drops.bounds == 0 and drops.ttl == 0
           and (not PG or (counts.configure_503 > 0 and counts.configure_201 > 0))
           and after <= baseline * 1.1 + 1024
if not ok then
    io.stderr:write("soak: conservation or memory check FAILED\n")
    os.exit(1)
end
io.stderr:write("soak: ok\n")
