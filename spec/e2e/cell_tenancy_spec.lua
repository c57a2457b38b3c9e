-- Tenancy through the relay: the edge decides identity and grant and
-- relays with the tenant in its mark, so each tenant sees only its own
-- messages through any broker of the cell, and a refusal the owner decides
-- (the tenant's bytes) comes back to the client as the owner gave it.
local cjson = require("cjson")
local daemon = require("e2e.daemon")
local helper = require("helper")

local T1 = { Authorization = "Bearer admin-token" }
local T2 = { Authorization = "Bearer other-tenant-token" }
local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400",
              QUEEN_TENANCY_HEADER = "true",
              QUEEN_EPHEMERAL_CELL_TOKEN = "cell-tenancy-spec-token-0123456789" }
local ARGS = { "--policy-dir " .. helper.root
               .. "/examples/policies/bearer-tokens" }

local function request(d, method, path, body, headers)
    return d:request(method, path, body, headers)
end

local function push(d, queue, partition, payload, headers)
    return request(d, "POST", "/api/v1/ephemeral/push", cjson.encode({
        queue = queue, partition = partition,
        messages = { { payload = payload } } }), headers)
end

-- Every payload of queue a tenant pops through d, naming no partition.
local function drain(d, queue, headers)
    local got = {}
    for _ = 1, 50 do
        local res = request(d, "GET", "/api/v1/ephemeral/pop?queue=" .. queue
                                      .. "&batch=50&commitOnDelivery=true",
                            nil, headers)
        assert.equals(200, res.status, res.body)
        if #res.json.messages == 0 then break end
        for _, m in ipairs(res.json.messages) do got[#got + 1] = m.payload end
    end
    table.sort(got)
    return got
end

describe("tenancy in a cell", function()
    it("keeps each tenant's messages its own through any broker, and "
       .. "passes the owner's quota refusal back", function()
        daemon.sql("TRUNCATE queen.ephemeral_quota")
        daemon.sql("INSERT INTO queen.ephemeral_quota (tenant_id, max_bytes) "
                   .. "VALUES ('11111111-1111-1111-1111-111111111111', NULL), "
                   .. "('22222222-2222-2222-2222-222222222222', 65536)")
        local ds = {}
        finally(function()
            daemon.stop_all(ds)
            daemon.sql("TRUNCATE queen.ephemeral_quota")
        end)
        for i = 1, 3 do
            ds[i] = daemon.start({ db = true, env = ENV, args = ARGS })
        end
        for _, d in ipairs(ds) do
            daemon.wait_until("a cell of three", function()
                local res = request(d, "GET", "/api/v1/system/cell", nil, T1)
                return res.status == 200 and res.json.live == 3
            end)
        end
        local want1, want2 = {}, {}
        for i = 1, 12 do
            assert.equals(201, push(ds[1], "shared", "p-" .. i, i, T1).status)
            assert.equals(201, push(ds[2], "shared", "p-" .. i, 100 + i,
                                    T2).status)
            want1[i], want2[i] = i, 100 + i
        end
        assert.same(want1, drain(ds[3], "shared", T1))
        assert.same(want2, drain(ds[1], "shared", T2))
        -- A partition of tenant 2's that ds[1] does not hold: pushes to it
        -- through ds[1] are relayed, and its owner refuses the tenant's
        -- bytes past its grant.
        local held = {}
        for i = 1, 12 do
            assert.equals(201, push(ds[1], "big", "b-" .. i, 0, T2).status)
        end
        local res = request(ds[1], "GET", "/api/v1/ephemeral/queues/big/depth",
                            nil, T2)
        for _, p in ipairs(res.status == 200 and res.json.partitions or {}) do
            held[p.partition] = true
        end
        local elsewhere
        for i = 1, 12 do
            if not held["b-" .. i] then elsewhere = "b-" .. i end
        end
        assert.truthy(elsewhere, "every partition on one broker")
        local payload = ("x"):rep(4096)
        for _ = 1, 40 do
            res = push(ds[1], "big", elsewhere, payload, T2)
            if res.status ~= 201 then break end
        end
        assert.equals(403, res.status, res.body)
        assert.equals("ephemeral_quota_exceeded", res.json.code)
        assert.truthy(res.json.error:find("the tenant's bytes", 1, true),
                      res.body)
        assert.is_nil(res.headers["retry-after"])
        -- Tenant 1 is not refused on the same owner.
        assert.equals(201, push(ds[1], "big", elsewhere, payload, T1).status)
    end)
end)
