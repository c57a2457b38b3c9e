local helper = require("helper")

describe("ephd.body", function()
    local body
    before_each(function()
        helper.core_double({})
        body = require("ephd.body")
    end)

    local function req(text)
        return (helper.request({ body = text }))
    end

    it("decodes a JSON object with allowed fields", function()
        local r, anchor = helper.request({ body = '{"queue":"q"}' })
        assert.same({ queue = "q" }, body.object(r, { queue = true }))
        assert.truthy(anchor)
    end)

    it("refuses what is not an object", function()
        for _, text in ipairs({ "", "[1]", '"x"', "1", "{", "[]", "[{}]",
                                '{"a":1,}' }) do
            assert.is_nil((body.object(req(text), { queue = true })), text)
        end
    end)

    -- lua-cjson would take these bytes as they are; the walk before it
    -- refuses them, and says why.
    it("refuses a body whose strings are not UTF-8", function()
        for _, text in ipairs({ '{"queue":"caf\233"}',
                                '{"queue":"q","options":{"p\237\160\128":1}}',
                                '{"queue":"\192\175"}' }) do
            local ok, err = body.object(req(text), { queue = true,
                                                     options = true })
            assert.is_nil(ok, text)
            assert.equals("the body is not UTF-8: every string must be "
                          .. "strict UTF-8 (RFC 3629)", err)
        end
        assert.same({ queue = "café" },
                    body.object(req('{"queue":"café"}'), { queue = true }))
    end)

    it("accepts an empty object", function()
        assert.same({}, body.object(req("{}"), { queue = true }))
        assert.same({}, body.object(req(" { } "), { queue = true }))
    end)

    it("names the allowed fields when one is unknown", function()
        local ok, err = body.object(req('{"queue":"q","tenant":"t"}'),
                                    { queue = true })
        assert.is_nil(ok)
        assert.truthy(err:find("tenant", 1, true))
        assert.truthy(err:find("queue", 1, true))
    end)

    it("tells an empty array from an empty object", function()
        assert.equals("[", body.kind(req('{"options":[]}'), "options"))
        assert.equals("{", body.kind(req('{"options":{}}'), "options"))
        assert.equals('"', body.kind(req('{"options":"x"}'), "options"))
        assert.is_nil(body.kind(req('{"queue":"q"}'), "options"))
    end)
end)
