local cjson = require("cjson")
local helper = require("helper")

describe("ephd.handlers.probes", function()
    local probes, answers, state
    before_each(function()
        local respond
        respond, answers = helper.responder()
        local C
        C = helper.core_double({
            ephd_ffi_respond = respond,
            ephd_ffi_database_state = function() return state end,
        })
        state = C.EPHD_DATABASE_UNAVAILABLE
        require("ephd.hooks").active = { name = "p", version = 2, hooks = {} }
        probes = require("ephd.handlers.probes")
    end)

    it("says the process is alive", function()
        probes.health(helper.request({}))
        assert.same({ status = 200, body = '{"status":"ok"}' },
                    answers[1])
    end)

    it("is ready with a policy, reporting the database as it is", function()
        probes.ready(helper.request({}))
        assert.equals(200, answers[1].status)
        assert.same({ ready = true, policy = { name = "p", version = 2 },
                      database = "unavailable" },
                    cjson.decode(answers[1].body))
    end)
end)
