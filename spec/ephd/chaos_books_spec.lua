-- bench/chaos's judge on books written by hand: each verdict it can give,
-- and the duplicates it must allow.
local helper = require("helper")
package.path = helper.root .. "/bench/?.lua;" .. package.path
local judge = require("chaos_books").judge

local GROUPS = { "g1", "g2" }

-- Books from pushes { partition, n, status[, code] } (payloads numbered
-- from 1, sent at t = their index) and deliveries { payload, group, t0,
-- t1, ack = { outcome, t0, t1 } | nil }.
local function books(pushes, deliveries, fault)
    local b = { pushes = {}, payload_push = {}, deliveries = {},
                fault = fault or {} }
    local next_payload = 1
    for i, p in ipairs(pushes) do
        b.pushes[i] = { first = next_payload, n = p.n or 1,
                        partition = p[1], broker = "b1", status = p[2],
                        code = p[3], t0 = i, t1 = i + 0.5 }
        for j = 0, (p.n or 1) - 1 do b.payload_push[next_payload + j] = i end
        next_payload = next_payload + (p.n or 1)
    end
    for i, d in ipairs(deliveries) do
        local push = b.pushes[b.payload_push[d[1]] or 0]
        b.deliveries[i] = { payload = d[1], group = d[2], t0 = d[3], t1 = d[4],
                            id = "e:x:p:" .. i, broker = "b1",
                            partition = d.partition or (push and push.partition),
                            ack = d.ack and { status = "completed",
                                              outcome = d.ack[1],
                                              t0 = d.ack[2], t1 = d.ack[3] } }
    end
    return b
end

local function acked_by_both(payload, t)
    return { payload, "g1", t, t + 1, ack = { "acked", t + 2, t + 3 } },
           { payload, "g2", t, t + 1, ack = { "acked", t + 2, t + 3 } }
end

describe("the chaos books", function()
    it("pass a message each group got once and acked", function()
        local r = judge(books({ { "p1", 201 } }, { acked_by_both(1, 10) }),
                        GROUPS, 0)
        assert.same({ g1 = 1, g2 = 1 }, r.delivered)
        assert.equal(0, r.lost_total)
        assert.equal(0, r.violations_total)
    end)

    it("count a 201 a group never got as lost, for that group", function()
        local r = judge(books({ { "p1", 201 } },
                              { { 1, "g1", 10, 11, ack = { "acked", 12, 13 } } }),
                        GROUPS, 0)
        assert.same({ g1 = 0, g2 = 1 }, r.lost)
        assert.equal(1, r.lost_by_partition.p1)
        assert.equal(1, r.samples.lost[1].payload)
    end)

    it("allow the loss of the kill -9 victim's partitions pushed before it died",
       function()
        local r = judge(books({ { "p1", 201 }, { "p2", 201 }, { "p1", 201 } }, {},
                              { killed_at = 2.5, victim_partitions = { "p1" } }),
                        GROUPS, 0)
        -- p1 before the kill: allowed; p2, and p1 after it: lost.
        assert.same({ g1 = 1, g2 = 1 }, r.lost_allowed)
        assert.same({ g1 = 2, g2 = 2 }, r.lost)
    end)

    it("call a delivery never pushed a phantom, and one on another partition misplaced",
       function()
        local r = judge(books({ { "p1", 201 } }, {
            { 7, "g1", 10, 11 },
            { 1, "g1", 10, 11, partition = "p2" },
        }), GROUPS, 0)
        assert.equal(1, r.phantom)
        assert.equal(1, r.misplaced)
        assert.equal(1, r.violations.phantom)
    end)

    it("hold a refusal to its word, but not a relay that failed", function()
        local r = judge(books({ { "p1", 503, "owner_moved" },
                                { "p1", 503, "ephemeral_forward_failed" },
                                { "p1", 0, "transport:recv:closed" } }, {
            { 1, "g1", 10, 11 }, { 2, "g1", 10, 11 }, { 3, "g1", 10, 11 },
        }), GROUPS, 0)
        assert.equal(1, r.violations.refused_but_delivered)
        assert.equal(2, r.uncertain_delivered)
        assert.equal(0, r.lost_total) -- none was answered 201
    end)

    it("find a message delivered after an ack completed it", function()
        local r = judge(books({ { "p1", 201 } }, {
            { 1, "g1", 10, 11, ack = { "acked", 12, 13 } },
            { 1, "g1", 14, 15 },
        }), GROUPS, 0)
        assert.equal(1, r.violations.delivered_after_ack)
    end)

    it("find a lease held twice: served after the first and before its ack",
       function()
        local r = judge(books({ { "p1", 201 } }, {
            { 1, "g1", 10, 11, ack = { "acked", 16, 17 } },
            { 1, "g1", 12, 13 },
        }), GROUPS, 0)
        assert.equal(1, r.violations.lease_twice)
    end)

    it("find two acks that both completed", function()
        local r = judge(books({ { "p1", 201 } }, {
            { 1, "g1", 10, 11, ack = { "acked", 12, 13 } },
            { 1, "g1", 10.5, 11.5, ack = { "acked", 12, 13 } },
        }), GROUPS, 0)
        assert.equal(1, r.violations.double_completed)
    end)

    it("allow a redelivery after stale, unknown, a retry, an expiry or a failed ack",
       function()
        local r = judge(books({ { "p1", 201 } }, {
            { 1, "g1", 10, 11, ack = { "stale", 12, 13 } },
            { 1, "g1", 14, 15, ack = { "unknown", 16, 17 } },
            { 1, "g1", 18, 19, ack = { "redelivered", 20, 21 } },
            { 1, "g1", 22, 23 },
            { 1, "g1", 30, 31, ack = { "failed:ephemeral_forward_failed", 32, 33 } },
            { 1, "g1", 34, 35, ack = { "acked", 36, 37 } },
            { 1, "g2", 10, 11, ack = { "acked", 12, 13 } },
        }), GROUPS, 0)
        assert.equal(0, r.violations_total)
        assert.same({ after_stale = 1, after_unknown = 1, after_redelivered = 1,
                      after_lease_expiry = 1, after_ack_failed = 1 },
                    r.duplicates_allowed)
    end)
end)
