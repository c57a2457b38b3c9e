-- The cell's routing is decided once per request, by the ladder, before a
-- routed verb's commit (core/cell/routing.h): the commits know nothing of
-- the cell, and a broker alone does not ask.
local ffi = require("ffi")
local helper = require("helper")
local testing = require("ephd.testing")

local DEFAULT = helper.root .. "/policies/default"

describe("the cell's routing", function()
    local size, routed, committed, route_rc, host, C

    local keep
    local function setup(members)
        local respond = helper.responder()
        size = ffi.new("uint32_t[1]", members)
        routed, committed, route_rc = {}, {}, 0
        C = helper.core_double({
            ephd_ffi_respond = respond,
            ephd_ffi_now_ms = function() return 0ULL end,
            ephd_ffi_wall_time = function() return 1700000000 end,
            ephd_ffi_cell_size = function() return size end,
            ephd_ffi_cell_route = function(_, verb, tenant, len, taken)
                routed[#routed + 1] = { tonumber(verb), ffi.string(tenant, len),
                                        tonumber(taken) }
                return route_rc
            end,
            ephd_ffi_push_scan = function(req)
                local scan = req.op.scan
                keep = { "q", "p" }
                scan.queue.ptr, scan.queue.len = "q", 1
                scan.partition.ptr, scan.partition.len = "p", 1
                scan.count, scan.bytes, scan.names_clean = 2, 8, 1
                return 0
            end,
            ephd_ffi_push_commit = function()
                committed[#committed + 1] = "push"
                return 0
            end,
            ephd_ffi_pop = function()
                committed[#committed + 1] = "pop"
                return 0
            end,
            ephd_ffi_ack_scan = function(req)
                local scan = req.op.scan
                scan.queue.ptr, scan.queue.len = "q", 1
                scan.has_group = 0
                return 0
            end,
            ephd_ffi_ack_commit = function()
                committed[#committed + 1] = "ack"
                return 0
            end,
            ephd_ffi_queues = function() committed[#committed + 1] = "queues" end,
        })
        host = require("ephd.host")
        assert(host.init(DEFAULT, testing.read(DEFAULT), DEFAULT,
                         testing.read(DEFAULT)))
    end

    local anchors = {}
    local function call(method, path, extra)
        local t = { method = method, path = path }
        for k, v in pairs(extra or {}) do t[k] = v end
        local req, anchor = helper.request(t)
        anchors[#anchors + 1] = anchor
        helper.slot[0] = req
        host.dispatch()
    end

    local function verbs()
        local json = "application/json"
        call("POST", "/api/v1/ephemeral/push",
             { body = '{"queue":"q"}', content_type = json })
        call("GET", "/api/v1/ephemeral/pop", { query = "queue=q" })
        call("POST", "/api/v1/ephemeral/ack",
             { body = '{"queue":"q"}', content_type = json })
        call("GET", "/api/v1/ephemeral/queues")
    end

    it("is not asked by a broker alone", function()
        setup(1)
        verbs()
        assert.same({}, routed)
        assert.same({ "push", "pop", "ack", "queues" }, committed)
    end)

    it("is asked once per routed verb in a cell, before its commit",
       function()
        setup(3)
        verbs()
        local tenant = "00000000-0000-0000-0000-000000000001"
        -- The push's rate, charged at the edge, goes with it (a refusal
        -- at the owner gives it back).
        assert.same({ { tonumber(C.EPHD_CELL_PUSH), tenant, 2 },
                      { tonumber(C.EPHD_CELL_POP), tenant, 0 },
                      { tonumber(C.EPHD_CELL_ACK), tenant, 0 } }, routed)
        assert.same({ "push", "pop", "ack", "queues" }, committed)
    end)

    it("runs no commit for a request it relayed", function()
        setup(3)
        route_rc = C.EPHD_RELAYED
        verbs()
        assert.equals(3, #routed)
        assert.same({ "queues" }, committed)
    end)
end)
