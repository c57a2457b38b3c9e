-- queues and depth: C writes the bodies; Lua checks what the route takes.
local ffi = require("ffi")
local helper = require("helper")

describe("ephd.handlers status reads", function()
    local answers, calls, found

    before_each(function()
        local respond
        respond, answers = helper.responder()
        calls = {}
        found = true
        local C
        C = helper.core_double({
            ephd_ffi_respond = respond,
            ephd_ffi_queues = function(_, t, tl)
                calls[#calls + 1] = { "queues", ffi.string(t, tl) }
            end,
            ephd_ffi_depth = function(_, t, tl, q, ql, g, gl)
                calls[#calls + 1] = { "depth", ffi.string(t, tl),
                                      ffi.string(q, ql),
                                      g ~= nil and ffi.string(g, gl) or nil }
                return found and 0 or C.EPHD_E_NOT_FOUND
            end,
        })
    end)

    local function run(handler, t)
        local ctx = helper.ctx(t, "t")
        local err = handler.parse(ctx)
        if err then return nil, err end
        return handler.commit(ctx)
    end

    it("queues reads the tenant's list and ignores parameters", function()
        local queues = require("ephd.handlers.queues").family
        assert.equals(0, run(queues, {}))
        assert.equals(0, run(queues, { query = "x=1" }))
        assert.same({ { "queues", "t" }, { "queues", "t" } }, calls)
    end)

    it("the operator's listing reads any tenant's, the caller's by default",
       function()
        local queues = require("ephd.handlers.queues").system
        local id = "0F0E0D0C-0B0A-4908-8706-050403020100"
        assert.equals(0, run(queues, {}))
        assert.equals(0, run(queues, { query = "tenant=" .. id }))
        assert.same({ { "queues", "t" }, { "queues", id:lower() } }, calls)
        local _, err = run(queues, { query = "tenant=nope" })
        assert.equals("tenant must be a UUID", err)
    end)

    it("depth passes the queue and the optional group", function()
        local depth = require("ephd.handlers.depth")
        run(depth, { query = "group=g", param = "q" })
        run(depth, { param = "q" })
        assert.same({ "depth", "t", "q", "g" }, calls[1])
        assert.same({ "depth", "t", "q" }, calls[2])
    end)

    it("depth refuses ephemeral_queue_not_found", function()
        local depth = require("ephd.handlers.depth")
        found = false
        -- Its own refusal, which the ladder answers (ephd.ladder).
        local bits, code, message = run(depth, { param = "nope" })
        assert.equals(0, bits)
        assert.equals("ephemeral_queue_not_found", code)
        assert.equals("no queue nope", message)
    end)

    it("depth refuses a bad group and ignores an unknown parameter",
       function()
        local depth = require("ephd.handlers.depth")
        assert.is_nil((run(depth, { query = "group=a%01b", param = "q" })))
        assert.equals(0, #calls)
        run(depth, { query = "grp=x", param = "q" })
        assert.same({ "depth", "t", "q" }, calls[1])
        -- An empty group is none, as the pop's.
        run(depth, { query = "group=", param = "q" })
        assert.same({ "depth", "t", "q" }, calls[2])
    end)
end)
