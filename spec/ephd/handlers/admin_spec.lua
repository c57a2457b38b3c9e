-- reset, delete and configure: the admin verbs.
local cjson = require("cjson")
local ffi = require("ffi")
local helper = require("helper")

describe("ephd.handlers admin verbs", function()
    local answers, calls, C
    local database -- whether the fake store has a connection

    before_each(function()
        local respond
        respond, answers = helper.responder()
        calls = {}
        database = true
        C = helper.core_double({
            ephd_respond = respond,
            -- A path segment decodes %XX and keeps '+' as it is.
            ephd_url_decode = function(s, n, out, plus_is_space)
                calls[#calls + 1] = { "decode", ffi.string(s, n),
                                      plus_is_space }
                local decoded = ({ ["a%2Fb+c"] = "a/b+c", ["q%0A"] = "q\n" })
                    [ffi.string(s, n)]
                ffi.copy(out, decoded, #decoded)
                return #decoded
            end,
            ephd_reset = function(t, tl, q, ql)
                calls[#calls + 1] = { "reset", ffi.string(t, tl),
                                      ffi.string(q, ql) }
                return 412ULL
            end,
            ephd_delete = function(_, t, tl, q, ql)
                calls[#calls + 1] = { "delete", ffi.string(t, tl),
                                      ffi.string(q, ql) }
                return database and C.EPHD_PARKED or C.EPHD_E_UNAVAILABLE
            end,
            ephd_configure = function(_, t, tl, q, ql, o)
                calls[#calls + 1] = {
                    "configure", ffi.string(t, tl), ffi.string(q, ql),
                    max_length = tonumber(o.max_length),
                    drop_oldest = o.drop_oldest,
                    window_count = tonumber(o.window_count),
                }
                return database and C.EPHD_PARKED or C.EPHD_E_UNAVAILABLE
            end,
        }, { max_cell_bytes = 1000 })
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

    it("delete hands a decoded, valid name to C, which answers", function()
        local delete = require("ephd.handlers.delete")
        delete(helper.request({}), "t", "a%2Fb+c")
        assert.same({ "decode", "a%2Fb+c", 0 }, calls[1])
        assert.same({ "delete", "t", "a/b+c" }, calls[2])
        assert.equals(0, #answers)
    end)

    it("delete answers 503 when no database connection is there", function()
        local delete = require("ephd.handlers.delete")
        database = false
        delete(helper.request({}), "t", "q")
        assert.equals(503, answers[1].status)
        assert.equals("ephemeral_unavailable",
                      cjson.decode(answers[1].body).code)
    end)

    it("delete refuses a bad name", function()
        local delete = require("ephd.handlers.delete")
        delete(helper.request({}), "t", ("q"):rep(513))
        delete(helper.request({}), "t", "q%0A")
        assert.equals(400, answers[1].status)
        assert.equals(400, answers[2].status)
        assert.same({ { "decode", "q%0A", 0 } }, calls)
    end)

    it("configure passes the options in force to C", function()
        local configure = require("ephd.handlers.configure")
        configure(helper.request({ body = '{"queue":"q","options":{'
            .. '"maxLength":7,"policy":"dropOldest",'
            .. '"windowBuffer":{"ms":5,"count":9}}}' }), "t")
        assert.same({ "configure", "t", "q", max_length = 7, drop_oldest = 1,
                      window_count = 9 }, calls[1])
        assert.equals(0, #answers) -- C answers once the write is done
    end)

    it("configure refuses a bad declaration without calling C", function()
        local configure = require("ephd.handlers.configure")
        configure(helper.request({ body = '{"queue":"q","options":{"x":1}}' }),
                  "t")
        configure(helper.request({ body = '{"options":{}}' }), "t")
        assert.equals(0, #calls)
        assert.equals(400, answers[1].status)
        assert.equals(400, answers[2].status)
    end)

    it("configure answers 503 when no database connection is there",
       function()
        local configure = require("ephd.handlers.configure")
        database = false
        configure(helper.request({ body = '{"queue":"q"}' }), "t")
        assert.equals(503, answers[1].status)
    end)
end)
