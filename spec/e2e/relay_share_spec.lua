-- A tenant's share of a member's parking lane: the relayed waiting pops one
-- tenant holds to one owner are bounded (QUEEN_EPHEMERAL_RELAY_TENANT_PARKED),
-- so one tenant's long polls cannot take the lane every tenant's relayed
-- waits to that member go through. Past its share a tenant hears 429
-- rate_limited, as for its own parked-pop slots; another tenant still parks.
local daemon = require("e2e.daemon")
local helper = require("helper")

local T1 = { Authorization = "Bearer admin-token" }
local T2 = { Authorization = "Bearer other-tenant-token" }
local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400",
              QUEEN_TENANCY_HEADER = "true",
              QUEEN_EPHEMERAL_RELAY_TENANT_PARKED = "2",
              QUEEN_EPHEMERAL_CELL_TOKEN = "relay-share-spec-token-0123456789" }
local ARGS = { "--policy-dir " .. helper.root
               .. "/examples/policies/bearer-tokens" }

-- Waits until d holds n parked pops (/metrics is the admin's here).
local function await_parked(d, n)
    daemon.wait_until(("%d parked on :%d"):format(n, d.port), function()
        local body = d:request("GET", "/metrics", nil, T1).body
        return tonumber(body:match("\nqueen_ephemeral_parked_polls (%d+)"))
               == n
    end)
end

-- A waiting pop sent on its own connection, its answer not read yet.
local function wait_on(d, queue, partition, headers)
    local c = d:connect()
    c:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=" .. queue
                                .. "&partition=" .. partition
                                .. "&wait=true&timeout=20000", nil, headers))
    return c
end

describe("a tenant's share of a member's parking lane", function()
    it("bounds its relayed waits to one owner, and no other tenant's",
       function()
        daemon.sql("TRUNCATE queen.ephemeral_quota")
        daemon.sql("INSERT INTO queen.ephemeral_quota (tenant_id) VALUES "
                   .. "('11111111-1111-1111-1111-111111111111'), "
                   .. "('22222222-2222-2222-2222-222222222222')")
        local ds, conns = {}, {}
        finally(function()
            for _, c in ipairs(conns) do c:close() end
            daemon.stop_all(ds)
            daemon.sql("TRUNCATE queen.ephemeral_quota")
        end)
        ds[1] = daemon.start({ db = true, env = ENV, args = ARGS })
        ds[2] = daemon.start({ db = true, env = ENV, args = ARGS })
        for _, d in ipairs(ds) do
            daemon.wait_until("a cell of two", function()
                local res = d:request("GET", "/api/v1/system/cell", nil, T1)
                return res.status == 200 and res.json.live == 2
            end)
        end
        local a, b = ds[1], ds[2]
        local p1 = a:owned_partitions(b, "waits", 3, T1)
        local p2 = a:owned_partitions(b, "waits", 1, T2)
        -- Tenant 1's two waits through a park at b: its whole share.
        conns[1] = wait_on(a, "waits", p1[1], T1)
        conns[2] = wait_on(a, "waits", p1[2], T1)
        await_parked(b, 2)
        local over = wait_on(a, "waits", p1[3], T1)
        conns[3] = over
        local res = assert(over:receive(5))
        assert.equals(429, res.status, res.body)
        assert.equals("rate_limited", res.json.code)
        assert.equals("1", res.headers["retry-after"])
        assert.equals("application/json", res.headers["content-type"])
        assert.same({ "code", "error" }, (function()
            local keys = {}
            for k in pairs(res.json) do keys[#keys + 1] = k end
            table.sort(keys)
            return keys
        end)())
        assert.truthy(res.json.error:find("QUEEN_EPHEMERAL_RELAY_TENANT_PARKED",
                                          1, true))
        -- A client author reads it among the refusals (docs/wire.md).
        local wire = assert(io.open(helper.root .. "/docs/wire.md")):read("*a")
        local order = wire:match("\n## The refusal order\n(.-)\n## ")
        assert.truthy(order:find("QUEEN_EPHEMERAL_RELAY_TENANT_PARKED", 1,
                                 true))
        -- Tenant 2's parks beside them.
        conns[4] = wait_on(a, "waits", p2[1], T2)
        await_parked(b, 3)
        -- A push ends one of tenant 1's waits: its slot is its own again.
        local pushed = a:push("waits", { "7" }, p1[1], T1)
        assert.equals(201, pushed.status, pushed.body)
        local woken = assert(conns[1]:receive(5))
        assert.equals(200, woken.status, woken.body)
        assert.equals(1, #woken.json.messages)
        await_parked(b, 2)
        conns[5] = wait_on(a, "waits", p1[3], T1)
        await_parked(b, 3)
    end)
end)
