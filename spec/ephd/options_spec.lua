local options = require("ephd.options")

describe("ephd.options", function()
    it("accepts every option of the closed list", function()
        local o = { maxBytes = 1048576, maxLength = 1000, policy = "dropOldest",
                    ttlSeconds = 30, leaseSeconds = 15, retryLimit = 3,
                    windowBuffer = { ms = 20, count = 50 } }
        assert.equals(o, options.check(o))
        assert.same({}, options.check(nil))
        assert.same({}, options.check({}))
    end)

    it("names the options that exist when a key is unknown", function()
        local ok, err = options.check({ ttlSecond = 1 })
        assert.is_nil(ok)
        assert.truthy(err:find("ttlSecond", 1, true))
        assert.truthy(err:find(table.concat(options.KEYS, ", "), 1, true))
    end)

    it("takes non-negative integers only", function()
        for _, v in ipairs({ 1.5, -1, "3", true, 2 ^ 60 }) do
            assert.is_nil((options.check({ ttlSeconds = v })))
        end
        assert.truthy(options.check({ ttlSeconds = 0 }))
    end)

    it("takes reject or dropOldest as policy", function()
        assert.is_nil((options.check({ policy = "drop" })))
        assert.truthy(options.check({ policy = "reject" }))
    end)

    it("takes windowBuffer as {ms, count} and nothing else", function()
        assert.is_nil((options.check({ windowBuffer = 5 })))
        assert.is_nil((options.check({ windowBuffer = { ms = 1 } })))
        assert.is_nil((options.check({ windowBuffer = { ms = 1, count = 2,
                                                        max = 3 } })))
        assert.is_nil((options.check({ windowBuffer = { ms = 1.5, count = 2 } })))
    end)
end)
