-- Isolation is absolute: no route lets one tenant see, count, pop, ack,
-- reset or delete another tenant's queue.
local daemon = require("e2e.daemon")

local A = { ["x-queen-tenant"] = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa" }
local B = { ["x-queen-tenant"] = "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb" }

describe("tenancy", function()
    local d
    before_each(function()
        daemon.forget_declarations()
        d = daemon.start({ db = true, env = { QUEEN_TENANCY_HEADER = "true",
                                              QUEEN_EPHEMERAL_REQUIRE_GRANT =
                                                  "false" } })
        assert.equals(201, d:push("shared", { "1", "2" }, nil, A).status)
    end)
    after_each(function() d:stop() end)

    local function depth_of_a()
        return d:request("GET", "/api/v1/ephemeral/queues/shared/depth", nil,
                         A).json.pending
    end

    it("takes the tenant from the header, never from the body", function()
        local res = d:request("POST", "/api/v1/ephemeral/push",
            '{"queue":"q","tenant":"bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb",'
            .. '"messages":[]}', A)
        assert.refused_with("ephemeral_bad_request", res)
    end)

    it("hides a tenant's queues from another's list", function()
        local list = d:request("GET", "/api/v1/ephemeral/queues", nil, B).json
        assert.equals(0, list.count)
        assert.equals(1, d:request("GET", "/api/v1/ephemeral/queues", nil, A)
                             .json.count)
    end)

    it("answers another tenant's depth read with 404", function()
        assert.refused_with("ephemeral_queue_not_found",
            d:request("GET", "/api/v1/ephemeral/queues/shared/depth", nil, B))
    end)

    it("never pops another tenant's messages", function()
        assert.same({}, d:pop("queue=shared&batch=10", B).json.messages)
        assert.equals(2, depth_of_a())
    end)

    it("never settles another tenant's lease", function()
        local m = d:pop("queue=shared&group=g", A).json.messages[1]
        local res = d:request("POST", "/api/v1/ephemeral/ack",
            '{"queue":"shared","group":"g","acks":[{"id":"' .. m.id .. '"}]}',
            B)
        assert.equals("unknown", res.json.results[1].outcome)
        res = d:request("POST", "/api/v1/ephemeral/ack",
            '{"queue":"shared","group":"g","acks":[{"id":"' .. m.id .. '"}]}',
            A)
        assert.equals("acked", res.json.results[1].outcome)
    end)

    it("never resets another tenant's queue", function()
        local res = d:request("POST", "/api/v1/ephemeral/reset",
                              '{"queue":"shared"}', B)
        assert.equals(0, res.json.dropped)
        assert.equals(2, depth_of_a())
    end)

    it("never deletes another tenant's queue or declaration", function()
        d:request("POST", "/api/v1/ephemeral/configure",
                  '{"queue":"shared","options":{"maxLength":50}}', A)
        local res = d:request("DELETE", "/api/v1/ephemeral/queue/shared", nil,
                              B)
        assert.same({ queue = "shared", deleted = false, declared = false },
                    res.json)
        assert.equals(2, depth_of_a())
        assert.equals("1", daemon.sql("SELECT count(*) FROM "
                                      .. "queen.ephemeral_queues"))
    end)

    it("keeps declarations apart: configuring B's queue leaves A's alone",
       function()
        d:request("POST", "/api/v1/ephemeral/configure",
                  '{"queue":"shared","options":{"maxLength":1}}', B)
        assert.equals(201, d:push("shared", { "3" }, nil, A).status)
        local res = d:push("shared", { "1", "2" }, nil, B)
        assert.refused_with("queue_full", res)
    end)

    it("refuses a tenant header that is not a UUID", function()
        assert.refused_with("unauthorized", d:request("GET",
            "/api/v1/ephemeral/queues", nil, { ["x-queen-tenant"] = "acme" }),
            401)
    end)
end)
