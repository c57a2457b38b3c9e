-- reset, delete and configure: the admin verbs.
local cjson = require("cjson")
local ffi = require("ffi")
local helper = require("helper")

describe("ephd.handlers admin verbs", function()
    local answers, calls, C
    local database, refusal, fanned

    before_each(function()
        local respond
        respond, answers = helper.responder()
        calls = {}
        database = true
        refusal = 0
        fanned = false
        C = helper.core_double({
            ephd_ffi_respond = respond,
            ephd_ffi_reset = function(t, tl, q, ql)
                calls[#calls + 1] = { "reset", ffi.string(t, tl),
                                      ffi.string(q, ql) }
                return 412ULL
            end,
            -- A cell's fan-out holds the answer and C makes it.
            ephd_ffi_reset_fanout = function(_, t, tl, a, al)
                calls[#calls + 1] = { "fanout", ffi.string(t, tl),
                                      ffi.string(a, al) }
                return fanned and C.EPHD_HELD or C.EPHD_OK
            end,
            ephd_ffi_delete = function(_, t, tl, q, ql)
                calls[#calls + 1] = { "delete", ffi.string(t, tl),
                                      ffi.string(q, ql) }
                return database and C.EPHD_HELD or C.EPHD_E_UNAVAILABLE
            end,
            ephd_ffi_configure = function(req, t, tl, q, ql, limits)
                local o = req.op.options
                calls[#calls + 1] = {
                    "configure", ffi.string(t, tl), ffi.string(q, ql),
                    max_length = tonumber(o.max_length),
                    drop_oldest = o.drop_oldest,
                    window_count = tonumber(o.window_count),
                    max_queues = tonumber(limits.max_queues),
                }
                if refusal ~= 0 then
                    req.op.refusals = refusal
                    return C.EPHD_E_REFUSED
                end
                return database and C.EPHD_HELD or C.EPHD_E_UNAVAILABLE
            end,
        }, { max_cell_bytes = 1000 })
    end)

    local function run(handler, t, tenant, limits)
        local ctx = helper.ctx(t, tenant or "t", limits)
        local err = handler.parse(ctx)
        if err then return nil, err end
        return handler.commit(ctx)
    end

    it("reset answers queue and dropped", function()
        local reset = require("ephd.handlers.reset")
        assert.equals(0, run(reset, { body = '{"queue":"presence"}' }))
        assert.same({ "reset", "t", "presence" }, calls[1])
        assert.same({ queue = "presence", dropped = 412 },
                    cjson.decode(answers[1].body))
        assert.equals(200, answers[1].status)
    end)

    it("reset leaves its answer to C when a cell fans it out", function()
        local reset = require("ephd.handlers.reset")
        fanned = true
        assert.equals(0, run(reset, { body = '{"queue":"presence"}' }))
        assert.same({ "fanout", "t", '{"queue":"presence","dropped":412}' },
                    calls[2])
        assert.equals(0, #answers)
    end)

    it("reset refuses a body without a valid queue", function()
        local reset = require("ephd.handlers.reset")
        for _, b in ipairs({ '{}', '{"queue":""}', '{"queue":2}', '{"q":"x"}' })
        do
            assert.is_nil((run(reset, { body = b })))
        end
        assert.equals(0, #calls)
    end)

    it("delete hands a decoded, valid name to C, which answers", function()
        local delete = require("ephd.handlers.delete")
        assert.equals(0, run(delete, { param = "a%2Fb+c" }))
        assert.same({ "delete", "t", "a/b+c" }, calls[1])
        assert.equals(0, #answers)
    end)

    it("delete refuses ephemeral_unavailable when no database connection "
       .. "is there", function()
        local delete = require("ephd.handlers.delete")
        database = false
        -- Its own refusal, which the ladder answers (ephd.ladder).
        local bits, code = run(delete, { param = "q" })
        assert.equals(0, bits)
        assert.equals("ephemeral_unavailable", code)
        assert.equals(0, #answers)
    end)

    it("delete refuses a bad name", function()
        local delete = require("ephd.handlers.delete")
        assert.is_nil((run(delete, { param = ("q"):rep(513) })))
        assert.is_nil((run(delete, { param = "q%0A" })))
        assert.is_nil((run(delete, { param = "q%zz" })))
        assert.equals(0, #calls)
    end)

    it("configure passes the options in force and the limits to C",
       function()
        local configure = require("ephd.handlers.configure")
        run(configure, { body = '{"queue":"q","options":{'
            .. '"maxLength":7,"policy":"dropOldest",'
            .. '"windowBuffer":{"ms":5,"count":9}}}' }, "t", { max_queues = 4 })
        assert.same({ "configure", "t", "q", max_length = 7, drop_oldest = 1,
                      window_count = 9, max_queues = 4 }, calls[1])
        assert.equals(0, #answers) -- C answers once the write is done
    end)

    it("configure refuses a bad declaration without calling C", function()
        local configure = require("ephd.handlers.configure")
        for _, b in ipairs({ '{"queue":"q","options":{"x":1}}',
                             '{"options":{}}', '{"queue":"q","options":[]}',
                             '{"queue":"q","options":{"maxLength":1.0}}' }) do
            assert.is_nil((run(configure, { body = b })), b)
        end
        assert.equals(0, #calls)
    end)

    it("configure refuses ephemeral_unavailable when no database "
       .. "connection is there", function()
        local configure = require("ephd.handlers.configure")
        database = false
        local bits, code = run(configure, { body = '{"queue":"q"}' })
        assert.equals(0, bits)
        assert.equals("ephemeral_unavailable", code)
    end)

    it("configure hands the queue allowance refusal to the ladder",
       function()
        local configure = require("ephd.handlers.configure")
        refusal = C.EPHD_REFUSE_TENANT_QUEUES
        assert.equals(refusal, run(configure, { body = '{"queue":"q"}' }))
    end)
end)
