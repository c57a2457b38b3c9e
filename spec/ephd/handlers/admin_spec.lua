-- reset, delete and configure: the admin verbs.
local cjson = require("cjson")
local ffi = require("ffi")
local helper = require("helper")

describe("ephd.handlers admin verbs", function()
    local answers, calls

    before_each(function()
        local respond
        respond, answers = helper.responder()
        calls = {}
        helper.core_double({
            ephd_respond = respond,
            ephd_reset = function(t, tl, q, ql)
                calls[#calls + 1] = { "reset", ffi.string(t, tl),
                                      ffi.string(q, ql) }
                return 412ULL
            end,
            ephd_delete = function(t, tl, q, ql)
                calls[#calls + 1] = { "delete", ffi.string(t, tl),
                                      ffi.string(q, ql) }
                return #calls == 1 and 1 or 0
            end,
        })
    end)

    it("reset answers queue and dropped", function()
        local reset = require("ephd.handlers.reset")
        reset(helper.request({ body = '{"queue":"presence"}' }), "t")
        assert.same({ "reset", "t", "presence" }, calls[1])
        assert.same({ queue = "presence", dropped = 412 },
                    cjson.decode(answers[1].body))
        assert.equals(200, answers[1].status)
    end)

    it("reset refuses a body without a valid queue", function()
        local reset = require("ephd.handlers.reset")
        for _, b in ipairs({ '{}', '{"queue":""}', '{"queue":2}', '{"q":"x"}' })
        do
            reset(helper.request({ body = b }), "t")
        end
        assert.equals(0, #calls)
        for _, a in ipairs(answers) do assert.equals(400, a.status) end
    end)

    it("delete reports deleted and never 404s", function()
        local delete = require("ephd.handlers.delete")
        delete(helper.request({}), "t", "q")
        delete(helper.request({}), "t", "q")
        assert.same({ queue = "q", deleted = true, declared = false },
                    cjson.decode(answers[1].body))
        assert.same({ queue = "q", deleted = false, declared = false },
                    cjson.decode(answers[2].body))
    end)

    it("delete refuses a bad name", function()
        local delete = require("ephd.handlers.delete")
        delete(helper.request({}), "t", ("q"):rep(513))
        assert.equals(400, answers[1].status)
        assert.equals(0, #calls)
    end)

    it("configure checks the declaration, then needs a database", function()
        local configure = require("ephd.handlers.configure")
        configure(helper.request({ body = '{"queue":"q","options":{"x":1}}' }),
                  "t")
        configure(helper.request({ body = '{"queue":"q","options":{}}' }), "t")
        assert.equals(400, answers[1].status)
        assert.equals(503, answers[2].status)
        assert.equals("ephemeral_unavailable",
                      cjson.decode(answers[2].body).code)
    end)
end)
