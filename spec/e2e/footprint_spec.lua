-- What names cost: queues, partitions and groups named by pops are charged
-- to the cell's footprint (QUEEN_EPHEMERAL_MAX_BYTES) with the messages,
-- and refused past it without creating anything; tenant records of tenants
-- that hold nothing are forgotten.
local daemon = require("e2e.daemon")
local helper = require("helper")

local CELL = 65536

local function tenant(i)
    return { ["x-queen-tenant"] = ("%08x-0000-4000-8000-000000000000")
                                  :format(i) }
end

-- /metrics is admin's: with tenancy headers on, the operator policy's
-- token is (spec/e2e/policies/operator); without them it is ignored.
local function gauge(d, name)
    local text = "\n" .. d:request("GET", "/metrics", nil,
                                   { Authorization = "Bearer operator" }).body
    return tonumber(text:match("\n" .. name .. " (%d+)"))
end

-- Pops naming a new name each until one is refused; the number named.
local function name_until_refused(c, query, limit)
    for i = 1, limit do
        local res = c:request("GET", "/api/v1/ephemeral/pop?" .. query(i))
        if res.status ~= 200 then
            assert.refused_with("ephemeral_unavailable", res)
            return i - 1
        end
    end
    error("nothing refused after " .. limit .. " names")
end

local SANITIZED = os.getenv("EPHD_SANITIZED") ~= nil

local function rss_mib(d)
    local f = io.open("/proc/" .. d.pid .. "/status")
    local kib = tonumber(f:read("*a"):match("VmRSS:%s+(%d+)"))
    f:close()
    return kib / 1024
end

describe("footprint", function()
    it("refuses partitions, groups and queues past the cell", function()
        local d = daemon.start({ env = {
            QUEEN_EPHEMERAL_MAX_BYTES = tostring(CELL),
            QUEEN_TENANCY_HEADER = "true",
            QUEEN_EPHEMERAL_REQUIRE_GRANT = "false" } })
        finally(function() d:stop() end)
        local c = d:connect()
        local parts = name_until_refused(c, function(i)
            return "queue=names&partition=p" .. i
        end, 10000)
        -- A partition is a few hundred bytes, not its name's length.
        assert.is_true(parts > 20 and parts < 400, tostring(parts))
        local listing = c:request("GET", "/api/v1/ephemeral/queues").json
        assert.is_true(listing.cellBytes <= CELL)
        assert.is_true(listing.cellBytes > CELL - 1024)
        -- Full: no new group, queue or tenant either, and nothing of any
        -- refused request was created.
        assert.refused_with("ephemeral_unavailable",
                            c:request("GET", "/api/v1/ephemeral/pop?"
                                             .. "queue=names&group=late"))
        assert.refused_with("ephemeral_unavailable",
                            c:request("GET", "/api/v1/ephemeral/pop?"
                                             .. "queue=another"))
        local tenants = gauge(d, "queen_ephemeral_tenants")
        assert.refused_with("ephemeral_unavailable", c:request("GET",
            "/api/v1/ephemeral/pop?queue=q", nil, tenant(7)))
        assert.equals(tenants, gauge(d, "queen_ephemeral_tenants"))
        local after = c:request("GET", "/api/v1/ephemeral/queues").json
        assert.equals(1, after.count)
        assert.equals(parts, after.queues[1].partitions)
        -- Queue mode's shared cursor alone: "late" was refused.
        assert.equals(1, after.queues[1].groups)
        assert.equals(listing.cellBytes, after.cellBytes)
        -- What exists still works.
        assert.equals(200, c:request("GET", "/api/v1/ephemeral/pop?"
                                            .. "queue=names&partition=p1")
                               .status)
        c:close()
    end)

    it("charges groups a cursor in every partition", function()
        local d = daemon.start({ env = {
            QUEEN_EPHEMERAL_MAX_BYTES = tostring(CELL) } })
        finally(function() d:stop() end)
        local c = d:connect()
        for i = 1, 100 do
            assert.equals(201, c:request("POST", "/api/v1/ephemeral/push",
                '{"queue":"wide","partition":"p' .. i
                .. '","messages":[{"payload":1}]}').status)
        end
        local groups = name_until_refused(c, function(i)
            return "queue=wide&group=g" .. i
        end, 1000)
        -- Each group pays a hundred cursors: few fit.
        assert.is_true(groups >= 1 and groups < 20, tostring(groups))
        local listing = c:request("GET", "/api/v1/ephemeral/queues").json
        assert.equals(groups, listing.queues[1].groups)
        assert.is_true(listing.cellBytes <= CELL)
        c:close()
    end)

    it("refuses queues past the cell", function()
        local d = daemon.start({ env = {
            QUEEN_EPHEMERAL_MAX_BYTES = tostring(CELL) } })
        finally(function() d:stop() end)
        local c = d:connect()
        local queues = name_until_refused(c, function(i)
            return "queue=inbox-" .. i
        end, 10000)
        assert.is_true(queues > 20 and queues < 400, tostring(queues))
        assert.equals(queues, c:request("GET", "/api/v1/ephemeral/queues")
                                  .json.count)
        c:close()
    end)

    it("serves a full queue's first consumer, who drains it", function()
        local d = daemon.start({ env = {
            QUEEN_EPHEMERAL_MAX_BYTES = tostring(CELL) } })
        finally(function() d:stop() end)
        local c = d:connect()
        local pushed = 0
        while true do
            local res = c:request("POST", "/api/v1/ephemeral/push",
                '{"queue":"jobs","messages":[{"payload":1}]}')
            if res.status ~= 201 then
                assert.refused_with("ephemeral_unavailable", res)
                break
            end
            pushed = pushed + 1
        end
        assert.is_true(pushed > 100, tostring(pushed))
        -- Queue mode's cursor is created by the first pop, and names
        -- nothing: refusing it would leave a full cell nobody may drain.
        local res = c:request("GET", "/api/v1/ephemeral/pop?queue=jobs"
                                     .. "&batch=10000&autoAck=true")
        assert.equals(200, res.status)
        assert.equals(pushed, #res.json.messages)
        assert.equals(201, c:request("POST", "/api/v1/ephemeral/push",
            '{"queue":"jobs","messages":[{"payload":1}]}').status)
        c:close()
    end)

    -- The hostile client's lease map attack, scaled down: per partition,
    -- 10,000 messages that 16 groups each pop whole and ack but for one.
    -- Each cursor's lease map kept the 16,384 slots of its pop (512 KiB,
    -- uncharged) for the lease left, 8 MiB a partition; it shrinks as
    -- leases settle, and what it holds is charged.
    it("gives back a cursor's lease map as its leases settle", function()
        local d = daemon.start({ env = {
            QUEEN_EPHEMERAL_MAX_BYTES = tostring(16 * 1024 * 1024),
            QUEEN_EPHEMERAL_RATE = "0",
            -- 10,000 messages in each of its partitions: the bound is
            -- the queue's.
            QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "1000000",
            QUEEN_EPHEMERAL_LEASE_S = "3600" } })
        finally(function() d:stop() end)
        local c = d:connect()
        local messages = ('{"payload":1},'):rep(9999) .. '{"payload":1}'
        local function partition(p)
            assert.equals(201, c:request("POST", "/api/v1/ephemeral/push",
                '{"queue":"q","partition":"p' .. p .. '","messages":['
                .. messages .. ']}').status)
            for g = 1, 16 do
                local body = c:request("GET", "/api/v1/ephemeral/pop?queue=q"
                    .. "&partition=p" .. p .. "&group=g" .. g
                    .. "&batch=10000").body
                local acks = {}
                for id in body:gmatch('"id":"(e:[^"]+)"') do
                    acks[#acks + 1] = '{"id":"' .. id .. '"}'
                end
                assert.equals(10000, #acks)
                acks[#acks] = nil
                local res = c:request("POST", "/api/v1/ephemeral/ack",
                    '{"queue":"q","group":"g' .. g .. '","acks":['
                    .. table.concat(acks, ",") .. ']}')
                assert.equals(200, res.status)
            end
        end
        -- The groups exist before the messages, so each sees them all.
        for g = 1, 16 do
            assert.equals(200, c:request("GET",
                "/api/v1/ephemeral/pop?queue=q&group=g" .. g).status)
        end
        partition(1)
        local base = rss_mib(d)
        for p = 2, 5 do partition(p) end
        local grown = rss_mib(d) - base
        -- Five partitions hold 80 leases and 5 messages between them.
        local listing = c:request("GET", "/api/v1/ephemeral/queues").json
        assert.equals(5, listing.queues[1].depth)
        assert.is_true(listing.cellBytes < 64 * 1024, listing.cellBytes)
        c:close()
        if SANITIZED then return end
        assert.is_true(grown < 8, ("grew %.1f MiB"):format(grown))
    end)

    -- A pop refused for the tenant's parked slots created its queue,
    -- partition and group first: 50 such pops left 50 queues behind.
    it("creates nothing for a pop refused for parked slots", function()
        local d = daemon.start({ env = { QUEEN_EPHEMERAL_MAX_PARKED = "1" } })
        finally(function() d:stop() end)
        local held = d:connect()
        held:send(daemon.format("GET",
            "/api/v1/ephemeral/pop?queue=hold&wait=true&timeout=10000"))
        assert.equals(201, d:push("full", { "1" }, "p").status)
        local c = d:connect()
        local before = c:request("GET", "/api/v1/ephemeral/queues").json
        assert.equals(2, before.count)
        local function waits(query)
            return c:request("GET", "/api/v1/ephemeral/pop?" .. query
                                    .. "&wait=true&timeout=5000")
        end
        for i = 1, 20 do
            assert.refused_with("rate_limited",
                waits("queue=new" .. i .. "&partition=p&group=g"))
        end
        -- A new partition holds nothing, nor does a new group of a queue
        -- with nothing in it.
        assert.refused_with("rate_limited", waits("queue=full&partition=q"))
        assert.refused_with("rate_limited", waits("queue=hold&group=late"))
        local after = c:request("GET", "/api/v1/ephemeral/queues").json
        assert.equals(2, after.count)
        assert.equals(before.cellBytes, after.cellBytes)
        assert.equals(0, d:depth("hold").json.partitionsPending)
        assert.equals(1, #d:depth("full").json.partitions)
        -- Its first pop's shared cursor alone: "late" was refused.
        assert.same({ { group = "__QUEUE_MODE__", pending = 0, skipped = 0 } },
                    d:depth("hold").json.groups)
        -- A new group sees what is there, so it takes it and needs no slot.
        local res = waits("queue=full&group=reader")
        assert.equals(200, res.status)
        assert.equals(1, #res.json.messages)
        c:close()
        held:close()
    end)

    it("forgets tenants that hold nothing", function()
        local d = daemon.start({ env = {
            QUEEN_TENANCY_HEADER = "true",
            QUEEN_EPHEMERAL_REQUIRE_GRANT = "false",
            QUEEN_EPHEMERAL_IMPLICIT_IDLE_S = "1",
            QUEEN_EPHEMERAL_METER_S = "1" }, args = {
            "--policy-dir " .. helper.root .. "/spec/e2e/policies/operator" } })
        finally(function() d:stop() end)
        local before = gauge(d, "queen_ephemeral_tenants")
        local c = d:connect()
        for i = 1, 300 do
            assert.equals(200, c:request("GET",
                "/api/v1/ephemeral/pop?queue=q", nil, tenant(i)).status)
        end
        assert.equals(before + 300, gauge(d, "queen_ephemeral_tenants"))
        -- Their queues are collected after a second idle, then the tenants
        -- a second later.
        local deadline = daemon.now() + 10
        while gauge(d, "queen_ephemeral_tenants") > before
                and daemon.now() < deadline do
            daemon.sleep(0.2)
        end
        assert.equals(before, gauge(d, "queen_ephemeral_tenants"))
        c:close()
    end)
end)
