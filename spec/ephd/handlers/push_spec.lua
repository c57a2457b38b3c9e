local ffi = require("ffi")
local helper = require("helper")

describe("ephd.handlers.push", function()
    local answers, commits, scan_result, refusal, push

    local keep -- the strings a fake scan points at
    local function scanned(queue, partition, count, bytes, clean)
        keep = { queue, partition }
        scan_result = function(scan)
            scan.queue.ptr, scan.queue.len = queue, #queue
            scan.partition.ptr, scan.partition.len = partition, #partition
            scan.count = count
            scan.bytes = bytes or count
            scan.names_clean = clean and 1 or 0
            return 0
        end
    end

    before_each(function()
        local respond
        respond, answers = helper.responder()
        commits = {}
        refusal = 0
        local C
        C = helper.core_double({
            ephd_ffi_respond = respond,
            ephd_ffi_push_scan = function(req) return scan_result(req.op.scan) end,
            ephd_ffi_push_commit = function(req, tenant, len, limits)
                commits[#commits + 1] = { ffi.string(tenant, len),
                                          tonumber(limits.max_bytes) }
                req.op.refusals = refusal
                if refusal ~= 0 then return C.EPHD_E_REFUSED end
                -- The real commit answers its own 201.
                local body = '{"pushed":' .. tonumber(req.op.scan.count) .. '}'
                respond(req, 201, nil, body, #body)
                return 0
            end,
        })
        push = require("ephd.handlers.push")
    end)

    it("parses what the rate rung and the cost hook need", function()
        scanned("q", "room-7", 3, 120)
        local ctx = helper.ctx({})
        assert.is_nil(push.parse(ctx))
        assert.same({ "q", "room-7", 3, 120 },
                    { ctx.queue, ctx.partition, ctx.messages, ctx.bytes })
        assert.truthy(keep)
    end)

    it("commits with the tenant's limits and answers 201", function()
        scanned("q", "Default", 3)
        local ctx = helper.ctx({}, "tenant-a", { max_bytes = 99 })
        push.parse(ctx)
        assert.equals(0, push.commit(ctx))
        assert.same({ { "tenant-a", 99 } }, commits)
        assert.same({ status = 201, body = '{"pushed":3}' }, answers[1])
    end)

    it("answers 201 pushed 0 for an empty array without committing",
       function()
        scanned("q", "Default", 0)
        local ctx = helper.ctx({})
        push.parse(ctx)
        assert.equals(0, push.commit(ctx))
        assert.same({}, commits)
        assert.equals('{"pushed":0}', answers[1].body)
    end)

    it("returns the scanner's message as the shape refusal", function()
        scan_result = function(scan)
            ffi.copy(scan.message, "messages must be an array")
            return -1
        end
        assert.equals("messages must be an array", push.parse(helper.ctx({})))
    end)

    it("refuses bad queue and partition names", function()
        scanned(("q"):rep(513), "Default", 1)
        assert.truthy(push.parse(helper.ctx({})):find("queue", 1, true))
        scanned("q", "p\1", 1)
        assert.truthy(push.parse(helper.ctx({})):find("partition", 1, true))
    end)

    -- C's scan checks the names it decodes (spec/e2e/push_spec.lua sends
    -- the bad ones); Lua checks a name only when C did not pass it.
    it("takes the names C passed without checking them again", function()
        local hooks = require("ephd.hooks")
        -- An operator's cost hook sees them, and so does admit.
        hooks.active = { hooks = {}, guarded = { cost = true },
                         messages_cost = false, reads_names = true }
        scanned(("q"):rep(513), "p\1", 1, 1, true)
        local ctx = helper.ctx({})
        assert.is_nil(push.parse(ctx))
        assert.equals("p\1", ctx.partition)
        -- The default's cost needs no name: none is read.
        hooks.active.messages_cost = true
        hooks.active.reads_names = false
        ctx = helper.ctx({})
        assert.is_nil(push.parse(ctx))
        assert.same({ 1, 1 }, { ctx.messages, ctx.bytes })
        assert.is_falsy(ctx.queue)
        assert.is_falsy(ctx.partition)
    end)

    it("hands the budget bits C reported back to the ladder", function()
        scanned("q", "Default", 1)
        refusal = 9
        local ctx = helper.ctx({})
        push.parse(ctx)
        assert.equals(9, push.commit(ctx))
        assert.equals(0, #answers)
    end)
end)
