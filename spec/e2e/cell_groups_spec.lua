-- A consumer group is the queue's, in a cell as on one broker: once a
-- group has popped a queue, every message pushed to any partition of it
-- is kept for that group until it takes it, whichever member owns the
-- partition and whichever group consumes it first (docs/cell.md, "A
-- queue's groups").
local daemon = require("e2e.daemon")

local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400",
              QUEEN_EPHEMERAL_CELL_TOKEN = "cell-groups-spec-token-0123456789",
              QUEEN_EPHEMERAL_HANDOVER_TIMEOUT_MS = "100" }

-- A cell just formed holds what its members took over for the hand-over
-- timeout plus a second (docs/cell.md, "A new owner frees nothing ..."):
-- the test is about a settled cell, so it waits that long (elapsed time).
local function settled(ds)
    daemon.await_cell(ds, 10)
    daemon.sleep(1.5)
end

-- The broker of ds holding partition part of queue.
local function holder(ds, queue, part)
    for _, d in ipairs(ds) do
        if d:held(queue)[part] then return d end
    end
end

-- Two partitions of queue on two different members, each holding one
-- message pushed through via, before any group popped; and their owners.
local function two_owners(ds, via, queue)
    local first, owner
    for i = 1, 60 do
        local part = "p-" .. i
        assert.equals(201, via:push(queue, { tostring(i) }, part).status)
        local d = holder(ds, queue, part)
        if not first then
            first, owner = part, d
        elseif d ~= owner then
            return first, owner, part, d
        end
    end
    error("every partition of " .. queue .. " landed on one member")
end

local function pop(d, query)
    local res = d:pop(query)
    assert.equals(200, res.status, res.body)
    return res.json.messages
end

describe("a queue's groups in a cell", function()
    it("keep a message for a group that popped another member's "
       .. "partition, after another group took it", function()
        local ds = daemon.start_cell(3, ENV)
        finally(function() daemon.stop_all(ds) end)
        settled(ds)
        local a = ds[1]
        local pa, _, pb = two_owners(ds, a, "fan")
        -- g2 pops the queue once, at pa's owner: from then on the queue
        -- keeps every message for it, as one broker does.
        assert.equals(1, #pop(a, "queue=fan&group=g2&partition=" .. pa))
        -- g1 takes and acks pb's message at pb's owner.
        local m = pop(a, "queue=fan&group=g1&partition=" .. pb)
        assert.equals(1, #m)
        local res = a:ack("fan", "g1", { { m[1].id } })
        assert.equals("acked", res.json.results[1].outcome, res.body)
        -- g2 still gets it, through any broker.
        local got = pop(ds[3], "queue=fan&group=g2&partition=" .. pb)
        assert.equals(1, #got, "the message was freed before g2 took it")
    end)

    it("keep a message for a group whose pop of the whole queue found "
       .. "nothing", function()
        local ds = daemon.start_cell(3, ENV)
        finally(function() daemon.stop_all(ds) end)
        settled(ds)
        local a = ds[1]
        -- Both groups pop the empty queue: it is theirs from now on.
        assert.equals(0, #pop(a, "queue=fan2&group=g1"))
        assert.equals(0, #pop(a, "queue=fan2&group=g2"))
        for i = 1, 12 do
            assert.equals(201, a:push("fan2", { tostring(i) }, "p-" .. i).status)
        end
        -- g1 takes and acks everything.
        local n = 0
        for _ = 1, 30 do
            local m = pop(ds[2], "queue=fan2&group=g1&batch=5")
            if #m == 0 then break end
            local acks = {}
            for i, x in ipairs(m) do acks[i] = { x.id } end
            ds[2]:ack("fan2", "g1", acks)
            n = n + #m
        end
        assert.equals(12, n)
        -- g2 gets every one of them too.
        n = 0
        for _ = 1, 30 do
            local m = pop(ds[3], "queue=fan2&group=g2&batch=5")
            if #m == 0 then break end
            n = n + #m
        end
        assert.equals(12, n)
    end)
end)

describe("a queue's groups in a cell that a member joins", function()
    it("reach the newcomer at the groups' next pops, so it keeps what a "
       .. "group has not read", function()
        local ds = daemon.start_cell(2, ENV)
        finally(function() daemon.stop_all(ds) end)
        settled(ds)
        local a, b = ds[1], ds[2]
        -- Both groups know the queue, which holds no partition: a member
        -- joining is handed nothing of it, groups included.
        assert.equals(0, #pop(a, "queue=late&group=g1"))
        assert.equals(0, #pop(a, "queue=late&group=g2"))
        ds[3] = daemon.start({ db = true, env = ENV })
        settled(ds)
        -- The groups go on popping, through brokers that knew them before
        -- the join.
        assert.equals(0, #pop(a, "queue=late&group=g2"))
        assert.equals(0, #pop(b, "queue=late&group=g1"))
        local on = {}
        for i = 1, 24 do
            assert.equals(201, a:push("late", { tostring(i) }, "p-" .. i).status)
            on[holder(ds, "late", "p-" .. i)] = true
        end
        assert.truthy(on[ds[3]], "no partition on the newcomer: "
                      .. require("cjson").encode({ ds[1]:held("late"),
                          ds[2]:held("late"), ds[3]:held("late"),
                          ds[3]:cell().live, ds[1]:cell().live }))
        local n = 0
        for _ = 1, 60 do
            local m = pop(b, "queue=late&group=g1&batch=5")
            if #m == 0 then break end
            local acks = {}
            for i, x in ipairs(m) do acks[i] = { x.id } end
            b:ack("late", "g1", acks)
            n = n + #m
        end
        assert.equals(24, n)
        n = 0
        for _ = 1, 60 do
            local m = pop(a, "queue=late&group=g2&batch=5")
            if #m == 0 then break end
            n = n + #m
        end
        assert.equals(24, n)
    end)
end)
