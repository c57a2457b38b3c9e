-- What a client sees through a broker that relays (an edge) against what it
-- sees at the owner itself, byte for byte where the contract speaks: status,
-- the headers but the owner hint, and the body (message ids aside, whose
-- sequence differs). And order through the relay's pipes: a client
-- pipelining on one keep-alive connection to an edge hears its answers in
-- request order, and its pushes land in the owner's ring in the order sent.
local daemon = require("e2e.daemon")
local helper = require("helper")
local placement = require("ephd.placement")
local cjson = require("cjson.safe")
local socket = require("socket")

local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400",
              QUEEN_EPHEMERAL_RATE = "100000",
              QUEEN_EPHEMERAL_BURST = "100000",
              QUEEN_EPHEMERAL_MAX_BODY_BYTES = "65536",
              QUEEN_EPHEMERAL_CELL_TOKEN = "relay-client-spec-token-012345" }

local function url(d) return "http://127.0.0.1:" .. d.port end

-- Partitions of queue that owner holds.
local function owned_by(via, owner, queue, n)
    return via:owned_partitions(owner, queue, n)
end

-- Whether owner holds queue's Default partition.
local function default_on(via, owner, queue)
    local view = via:request("GET", "/api/v1/ephemeral/cell").json
    for _, m in ipairs(view.members) do m.id = placement.id(m.id) end
    return placement.owner(view.members, view.tenant, queue, "Default").address
           == url(owner)
end

-- A queue name whose Default partition owner holds.
local function queue_defaulting_to(via, owner, prefix)
    for i = 1, 500 do
        local q = prefix .. i
        if default_on(via, owner, q) then return q end
    end
    error("no queue's Default on " .. url(owner))
end

-- One answer read raw off s: the status line, the header lines as sent
-- (in order), and the body.
local function read_raw(s)
    local line = assert(s:receive("*l"))
    local heads, len = {}, 0
    while true do
        local h = assert(s:receive("*l"))
        if h == "" then break end
        heads[#heads + 1] = h
        local n = h:match("^[Cc]ontent%-[Ll]ength:%s*(%d+)")
        if n then len = tonumber(n) end
    end
    local body = len > 0 and assert(s:receive(len)) or ""
    return { line = line, heads = heads, body = body }
end

-- One request (or its bytes, as method) on a fresh connection, its answer
-- read raw.
local function raw(d, method, path, body, headers)
    local s = assert(socket.connect("127.0.0.1", d.port))
    s:settimeout(10)
    assert(s:send(path and daemon.format(method, path, body, headers)
                  or method))
    local res = read_raw(s)
    s:close()
    return res
end

-- An answer as a client may compare it: the owner hint taken out (and
-- returned apart), message ids' sequence and epoch blanked.
local function comparable(res)
    local heads, hint = {}, nil
    for _, h in ipairs(res.heads) do
        local v = h:match("^X%-Queen%-Owner%-Address: (.*)$")
        local n = h:match("^Content%-Length:%s*(%d+)$")
        if v then
            hint = v
        elseif n then
            assert.equals(#res.body, tonumber(n))
        else
            heads[#heads + 1] = h
        end
    end
    local body = res.body:gsub('"e:%x+:([^"]*):%d+"', '"e:EPOCH:%1:SEQ"')
    return { line = res.line, heads = table.concat(heads, "\n"),
             body = body }, hint
end

-- Asserts an edge's answer is the owner's, the hint aside, and that only
-- the relayed one names the owner (when hinted).
local function same(edge, direct, owner, hinted)
    local e, hint = comparable(edge)
    local o, ohint = comparable(direct)
    assert.same(o, e)
    assert.is_nil(ohint)
    if hinted then
        assert.equals(url(owner), hint)
    else
        assert.is_nil(hint)
    end
end

local function push_body(queue, partition, payloads)
    local msgs = {}
    for i, p in ipairs(payloads) do msgs[i] = '{"payload":' .. p .. '}' end
    return '{"queue":' .. cjson.encode(queue)
           .. (partition and (',"partition":' .. cjson.encode(partition)) or "")
           .. ',"messages":[' .. table.concat(msgs, ",") .. ']}'
end

describe("a client through an edge", function()
    local ds, a, b, c
    setup(function()
        daemon.forget_declarations()
        ds = daemon.start_cell(3, ENV)
        daemon.await_cell(ds, 20)
        a, b, c = ds[1], ds[2], ds[3]
    end)
    teardown(function() daemon.stop_all(ds) end)

    it("hears a push's answers as the owner gives them", function()
        local p = owned_by(a, c, "pushes", 1)[1]
        local body = push_body("pushes", p, { "1" })
        local e = raw(a, "POST", "/api/v1/ephemeral/push", body)
        local o = raw(c, "POST", "/api/v1/ephemeral/push", body)
        assert.equals("HTTP/1.1 201 Created", o.line)
        assert.equals('{"pushed":1}', o.body)
        same(e, o, c, true)
        -- batched
        body = push_body("pushes", p, { "1", '{"a":[1,2]}', '"x"' })
        same(raw(a, "POST", "/api/v1/ephemeral/push", body),
             raw(c, "POST", "/api/v1/ephemeral/push", body), c, true)
        -- no partition: the Default one, which c owns
        local q = queue_defaulting_to(a, c, "dflt-")
        body = push_body(q, nil, { "1", "2" })
        same(raw(a, "POST", "/api/v1/ephemeral/push", body),
             raw(c, "POST", "/api/v1/ephemeral/push", body), c, true)
        assert.equals(4, c:held(q).Default)
        -- empty: nothing to append, answered by the edge, so no hint
        body = push_body("pushes", p, {})
        same(raw(a, "POST", "/api/v1/ephemeral/push", body),
             raw(c, "POST", "/api/v1/ephemeral/push", body), c, false)
    end)

    it("hears a push's refusals as the owner gives them", function()
        local p = owned_by(a, c, "refused", 1)[1]
        local bad = {
            '{"queue":"refused","partition":"' .. p
                .. '","messages":[{"payload":1,"x":2}]}',
            '{"queue":"refused","partition":"' .. p .. '","messages":[',
            '{"queue":"refused","partition":"' .. p .. '"}',
            '{"queue":"refused","partition":"' .. p .. '","tenant":"t",'
                .. '"messages":[]}',
            '{"queue":"refused","partition":"' .. ("x"):rep(513)
                .. '","messages":[]}',
        }
        for _, body in ipairs(bad) do
            local e = raw(a, "POST", "/api/v1/ephemeral/push", body)
            local o = raw(c, "POST", "/api/v1/ephemeral/push", body)
            assert.matches("^HTTP/1.1 400 ", o.line)
            same(e, o, c, false)
        end
        -- over the body limit
        local big = daemon.format("POST", "/api/v1/ephemeral/push", nil,
                                  { ["Content-Type"] = "application/json",
                                    ["Content-Length"] = "70000" })
        local e = raw(a, big)
        local o = raw(c, big)
        assert.matches("^HTTP/1.1 413 ", o.line)
        same(e, o, c, false)
        -- a wrong content type
        local body = push_body("refused", p, { "1" })
        same(raw(a, "POST", "/api/v1/ephemeral/push", body,
                 { ["Content-Type"] = "text/plain" }),
             raw(c, "POST", "/api/v1/ephemeral/push", body,
                 { ["Content-Type"] = "text/plain" }), c, false)
        -- queue_full: the owner's bound, declared on every broker
        for _, d in ipairs(ds) do
            local res = d:request("POST", "/api/v1/ephemeral/configure",
                                  '{"queue":"full","options":{"maxLength":1}}')
            assert.equals(201, res.status, res.body)
        end
        local fp = owned_by(a, c, "full", 1)[1]
        assert.equals(201, c:push("full", { "1" }, fp).status)
        body = push_body("full", fp, { "2" })
        e = raw(a, "POST", "/api/v1/ephemeral/push", body)
        o = raw(c, "POST", "/api/v1/ephemeral/push", body)
        assert.matches("^HTTP/1.1 429 ", o.line)
        assert.equals("queue_full", cjson.decode(o.body).code)
        same(e, o, c, true)
    end)

    it("hears each ack outcome, split or not, as the owner gives it",
       function()
        local p = owned_by(a, c, "acks", 1)[1]
        local pb = owned_by(a, b, "acks", 1)[1]
        assert.equals(201, c:push("acks", { "1", "2", "3", "4" }, p).status)
        assert.equals(201, b:push("acks", { "1" }, pb).status)
        local function pop(d, part, n)
            local res = d:pop("queue=acks&group=g&batch=" .. n
                              .. "&partition=" .. part)
            assert.equals(200, res.status, res.body)
            local ids = {}
            for i, m in ipairs(res.json.messages) do ids[i] = m.id end
            return ids
        end
        local ids = pop(c, p, 4)
        local bid = pop(b, pb, 1)[1]
        assert.equals(4, #ids)
        local epoch = ids[1]:match("^e:(%x+):")
        local function ack(list)
            local items = {}
            for i, x in ipairs(list) do
                items[i] = '{"id":' .. cjson.encode(x[1]) .. ',"status":"'
                           .. x[2] .. '"}'
            end
            return '{"queue":"acks","group":"g","acks":['
                   .. table.concat(items, ",") .. ']}'
        end
        -- acked and redelivered through the edge, the same through the owner
        local e = raw(a, "POST", "/api/v1/ephemeral/ack",
                      ack({ { ids[1], "completed" }, { ids[2], "retry" } }))
        local o = raw(c, "POST", "/api/v1/ephemeral/ack",
                      ack({ { ids[3], "completed" }, { ids[4], "failed" } }))
        assert.equals("HTTP/1.1 200 OK", o.line)
        local ej, oj = cjson.decode(e.body), cjson.decode(o.body)
        assert.same({ "acked", "redelivered" },
                    { ej.results[1].outcome, ej.results[2].outcome })
        assert.same({ "acked", "redelivered" },
                    { oj.results[1].outcome, oj.results[2].outcome })
        local ec, hint = comparable(e)
        local oc = comparable(o)
        assert.equals(oc.heads, ec.heads)
        assert.equals(url(c), hint)
        -- unknown (acked already) and stale (an epoch no member has)
        local gone = "e:00000001:" .. p .. ":1"
        local body = ack({ { ids[1], "completed" }, { gone, "completed" } })
        e = raw(a, "POST", "/api/v1/ephemeral/ack", body)
        o = raw(c, "POST", "/api/v1/ephemeral/ack", body)
        ej = cjson.decode(e.body)
        assert.same({ "unknown", "stale" },
                    { ej.results[1].outcome, ej.results[2].outcome })
        ec = comparable(e)
        oc = comparable(o)
        assert.equals(oc.body, ec.body)
        assert.equals(oc.line, ec.line)
        -- mixed epochs: b's id and c's, split by the edge, in order
        body = ack({ { ids[3], "completed" }, { bid, "completed" } })
        e = raw(a, "POST", "/api/v1/ephemeral/ack", body)
        ej = cjson.decode(e.body)
        assert.equals("HTTP/1.1 200 OK", e.line)
        assert.same({ { id = ids[3], outcome = "unknown" },
                      { id = bid, outcome = "acked" } }, ej.results)
        local _, shint = comparable(e)
        assert.is_nil(shint)
        assert.truthy(epoch)
    end)

    it("hears a pop's answers as the owner gives them", function()
        local p = owned_by(a, c, "pops", 1)[1]
        local function both(query)
            assert.equals(201, c:push("pops", { '{"n":1}' }, p).status)
            local e = raw(a, "GET", "/api/v1/ephemeral/pop?" .. query)
            assert.equals(201, c:push("pops", { '{"n":1}' }, p).status)
            local o = raw(c, "GET", "/api/v1/ephemeral/pop?" .. query)
            assert.equals("HTTP/1.1 200 OK", o.line)
            return e, o
        end
        for _, q in ipairs({ "queue=pops&partition=" .. p,
                             "queue=pops&partition=" .. p .. "&group=g2",
                             "queue=pops&partition=" .. p
                                 .. "&commitOnDelivery=true",
                             "queue=pops&partition=" .. p
                                 .. "&wait=true&timeout=2000" }) do
            local e, o = both(q)
            same(e, o, c, true)
        end
        -- empty, not waiting and waiting
        local pe = owned_by(a, c, "pops-empty", 1)[1]
        for _, q in ipairs({ "", "&group=g3", "&wait=true&timeout=200" }) do
            q = "queue=pops-empty&partition=" .. pe .. q
            same(raw(a, "GET", "/api/v1/ephemeral/pop?" .. q),
                 raw(c, "GET", "/api/v1/ephemeral/pop?" .. q), c, true)
        end
        -- a bad query: the edge's shape, the same words
        for _, q in ipairs({ "partition=" .. p, "queue=pops&partition=" .. p
                                                .. "&wait=ture",
                             "queue=pops&partition=" .. p .. "&batch=1O" }) do
            same(raw(a, "GET", "/api/v1/ephemeral/pop?" .. q),
                 raw(c, "GET", "/api/v1/ephemeral/pop?" .. q), c, false)
        end
    end)

    it("hears pipelined answers in order, its pushes held in order",
       function()
        local p = owned_by(a, c, "order", 1)[1]
        local p2 = owned_by(a, b, "order", 1)[1]
        local reqs, want = {}, {}
        for i = 1, 60 do
            local part = (i % 3 == 0) and p2 or p
            reqs[#reqs + 1] = daemon.format("POST", "/api/v1/ephemeral/push",
                                            push_body("order", part,
                                                      { tostring(i) }))
            want[#want + 1] = "push"
            if i % 10 == 0 then
                reqs[#reqs + 1] = daemon.format("GET",
                    "/api/v1/ephemeral/pop?queue=order-x&partition=" .. p)
                want[#want + 1] = "pop"
                reqs[#reqs + 1] = daemon.format("POST",
                    "/api/v1/ephemeral/push", '{"queue":"order"}')
                want[#want + 1] = "bad"
            end
        end
        local s = assert(socket.connect("127.0.0.1", a.port))
        s:settimeout(10)
        assert(s:send(table.concat(reqs)))
        for i, kind in ipairs(want) do
            local res = read_raw(s)
            if kind == "push" then
                assert.equals("HTTP/1.1 201 Created", res.line, i)
                assert.equals('{"pushed":1}', res.body)
            elseif kind == "pop" then
                assert.equals("HTTP/1.1 200 OK", res.line, i)
                assert.truthy(res.body:find('"queue":"order-x"', 1, true))
            else
                assert.matches("^HTTP/1.1 400 ", res.line)
            end
        end
        s:close()
        local function drained(d, part)
            local res = d:pop("queue=order&batch=100&partition=" .. part)
            local got = {}
            for _, m in ipairs(res.json.messages) do got[#got + 1] = m.payload end
            return got
        end
        local wantc, wantb = {}, {}
        for i = 1, 60 do
            if i % 3 == 0 then wantb[#wantb + 1] = i
            else wantc[#wantc + 1] = i end
        end
        assert.same(wantc, drained(c, p))
        assert.same(wantb, drained(b, p2))
    end)

    it("pops, pipelined behind its push on one connection, what it pushed",
       function()
        local p = owned_by(a, c, "ryw", 1)[1]
        local s = assert(socket.connect("127.0.0.1", a.port))
        s:settimeout(10)
        local reqs = {}
        for i = 1, 30 do
            reqs[#reqs + 1] = daemon.format("POST", "/api/v1/ephemeral/push",
                                            push_body("ryw", p,
                                                      { tostring(i) }))
            reqs[#reqs + 1] = daemon.format("GET",
                "/api/v1/ephemeral/pop?queue=ryw&commitOnDelivery=true"
                .. "&partition=" .. p)
        end
        assert(s:send(table.concat(reqs)))
        local got = {}
        for i = 1, 30 do
            assert.equals("HTTP/1.1 201 Created", read_raw(s).line)
            local res = read_raw(s)
            local m = cjson.decode(res.body).messages[1]
            got[i] = m and m.payload or "none"
        end
        s:close()
        local want = {}
        for i = 1, 30 do want[i] = i end
        assert.same(want, got)
    end)

    it("keeps each connection's order when several push through two edges",
       function()
        local p = owned_by(a, c, "many", 1)[1]
        local per, clients = 40, {}
        -- Four connections, two on each edge, each pipelining its pushes
        -- of one partition (payloads "<client>-<i>"), sent interleaved.
        for k = 1, 4 do
            local edge = (k % 2 == 0) and b or a
            local s = assert(socket.connect("127.0.0.1", edge.port))
            s:settimeout(10)
            clients[k] = s
        end
        for i = 1, per do
            for k, s in ipairs(clients) do
                assert(s:send(daemon.format("POST", "/api/v1/ephemeral/push",
                    push_body("many", p,
                              { cjson.encode(k .. "-" .. i) }))))
            end
        end
        for _, s in ipairs(clients) do
            for _ = 1, per do
                local res = read_raw(s)
                assert.equals("HTTP/1.1 201 Created", res.line)
            end
            s:close()
        end
        local res = c:pop("queue=many&batch=1000&partition=" .. p)
        local next_of = {}
        assert.equals(4 * per, #res.json.messages)
        for _, m in ipairs(res.json.messages) do
            local k, i = m.payload:match("^(%d+)-(%d+)$")
            k, i = tonumber(k), tonumber(i)
            assert.equals((next_of[k] or 0) + 1, i, m.payload)
            next_of[k] = i
        end
    end)
end)

-- ephemeral_forward_failed after the relay wrote the request: the owner
-- may have applied it, and a client must be told so (docs/client.md).
-- An owner that stalls (SIGSTOP) past the relay's deadline with a push and
-- an ack unread, and then reads them: both are applied, after the client
-- heard 503 for each.
describe("a client told ephemeral_forward_failed", function()
    local ds
    setup(function()
        ds = daemon.start_cell(2, {
            QUEEN_EPHEMERAL_MEMBER_TTL_MS = "10000",
            QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS = "300",
            QUEEN_EPHEMERAL_CELL_TOKEN = ENV.QUEEN_EPHEMERAL_CELL_TOKEN })
        daemon.await_cell(ds, 30)
    end)
    teardown(function()
        os.execute("kill -CONT " .. ds[2].pid)
        daemon.stop_all(ds)
    end)

    it("may have had its push or ack applied, and is told so", function()
        local a, c = ds[1], ds[2]
        local p = owned_by(a, c, "stalled", 1)[1]
        assert.equals(201, a:push("stalled", { "1" }, p).status)
        local id = a:pop("queue=stalled&partition=" .. p).json.messages[1].id
        os.execute("kill -STOP " .. c.pid)
        local pushed = a:push("stalled", { "2" }, p)
        local acked = a:ack("stalled", nil, { { id, "completed" } })
        os.execute("kill -CONT " .. c.pid)
        for _, res in ipairs({ pushed, acked }) do
            assert.equals(503, res.status, res.body)
            assert.equals("ephemeral_forward_failed", res.json.code)
            assert.equals("1", res.headers["retry-after"])
        end
        -- Both were applied: the push is there, the ack settled the lease.
        local res = c:pop("queue=stalled&partition=" .. p)
        assert.equals(2, res.json.messages[1].payload)
        res = a:ack("stalled", nil, { { id, "completed" } })
        assert.equals("unknown", res.json.results[1].outcome)
        -- What the docs tell a client author to do about it.
        local doc = assert(io.open(helper.root .. "/docs/client.md")):read("*a")
        local errors = doc:match("\n## Errors\n(.-)\n## ")
        assert.truthy(errors:find("`ephemeral_forward_failed`", 1, true))
        assert.truthy(errors:find("may have been applied", 1, true))
    end)
end)
