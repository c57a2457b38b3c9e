-- Ownership moves (docs/cell.md, "Moves"): a partition that moves to
-- another broker without being handed over is emptied where it was (the
-- loss contract), its old ids answer stale, and the drop is counted.
local daemon = require("e2e.daemon")

local TOKEN = "moves-spec-cell-token-0123456789"
local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400",
              QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN }

local function await_live(ds, n, seconds)
    local t0 = daemon.now()
    for _, d in ipairs(ds) do
        while d:cell().live ~= n and daemon.now() - t0 < seconds do
            daemon.sleep(0.05)
        end
        assert.equals(n, d:cell().live, "the cell did not settle")
    end
end

local function held(d, queue)
    local res = d:depth(queue)
    if res.status == 404 then return {} end
    assert.equals(200, res.status, res.body)
    local parts = {}
    for _, p in ipairs(res.json.partitions) do parts[p.partition] = p.pending end
    return parts
end

local function metric(d, pattern)
    local body = d:request("GET", "/metrics").body
    return tonumber(body:match(pattern)) or 0
end

local WIPES = 'queen_ephemeral_wipes_total{reason="unplanned"} (%d+)'

describe("ownership moves", function()
    it("empty a partition that moved without a hand-over, and its old ids "
       .. "answer stale", function()
        local a = daemon.start({ db = true, env = ENV })
        local b
        finally(function()
            a:stop()
            if b then b:stop() end
        end)
        await_live({ a }, 1, 5)
        -- Alone, a owns every partition: three messages each, one leased.
        local ids = {}
        for i = 1, 20 do
            local part = "p-" .. i
            assert.equals(201, a:push("moving", { "1", "2", "3" }, part).status)
            local res = a:pop("queue=moving&group=g&batch=1&partition=" .. part)
            assert.equals(1, #res.json.messages)
            ids[part] = res.json.messages[1].id
        end
        b = daemon.start({ db = true, env = ENV })
        await_live({ a, b }, 2, 10)
        local log = a:await_log("event=partitions_wiped", 5)
        -- What b owns now is empty on a; a keeps its own.
        local kept, moved = held(a, "moving"), {}
        for i = 1, 20 do
            local part = "p-" .. i
            if kept[part] == 0 then moved[#moved + 1] = part
            else assert.equals(3, kept[part], part) end
        end
        assert.is_true(#moved > 0 and #moved < 20, #moved .. " moved")
        assert.truthy(log:find("messages=" .. 3 * #moved, 1, true), log)
        assert.equals(3 * #moved, metric(a, WIPES))
        assert.equals(0, metric(b, WIPES))
        -- The moved partitions' old ids answer stale, through either broker;
        -- the kept ones settle.
        for _, d in ipairs({ a, b }) do
            local res = d:ack("moving", "g", { { ids[moved[1]], "completed" } })
            assert.equals(200, res.status, res.body)
            assert.equals("stale", res.json.results[1].outcome)
        end
        for part, id in pairs(ids) do
            if kept[part] == 3 then
                local res = b:ack("moving", "g", { { id, "completed" } })
                assert.equals("acked", res.json.results[1].outcome)
                break
            end
        end
        -- b starts them empty, and serves them.
        assert.is_nil(held(b, "moving")[moved[1]])
        assert.equals(201, a:push("moving", { "9" }, moved[1]).status)
        assert.equals(1, held(b, "moving")[moved[1]])
    end)
end)
