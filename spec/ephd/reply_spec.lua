local cjson = require("cjson")
local helper = require("helper")

describe("ephd.reply", function()
    local reply, answers
    before_each(function()
        local respond
        respond, answers = helper.responder()
        helper.core_double({ ephd_ffi_respond = respond })
        reply = require("ephd.reply")
    end)

    it("writes JSON bodies with their status", function()
        reply.json("req", 201, '{"pushed":1}')
        assert.same({ status = 201, body = '{"pushed":1}' }, answers[1])
    end)

    it("writes refusals from the taxonomy", function()
        reply.bad_request("req", "no queue")
        assert.equals(400, answers[1].status)
        assert.same({ error = "no queue", code = "ephemeral_bad_request" },
                    cjson.decode(answers[1].body))
        reply.refuse("req", "ephemeral_bad_request", "m", 405, "Allow: GET\r\n")
        assert.equals(405, answers[2].status)
        assert.equals("Allow: GET\r\n", answers[2].headers)
    end)

    it("keeps a refusal UTF-8 when its message quotes bytes that are not",
       function()
        reply.refuse("req", "ephemeral_bad_request", "no route caf\233")
        assert.equals('{"error":"no route caf?","code":"ephemeral_bad_request"}',
                      answers[1].body)
        reply.bad_request("req", "unknown parameter \255\254")
        assert.equals("unknown parameter ??", cjson.decode(answers[2].body).error)
        reply.bad_request("req", "no queue café")
        assert.equals("no queue café", cjson.decode(answers[3].body).error)
    end)
end)
