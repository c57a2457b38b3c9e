local testing = require("ephd.testing")

local DIR = (os.getenv("EPHD_SOURCE_DIR") or ".")
            .. "/examples/policies/large-payload-rate"

describe("examples/policies/large-payload-rate", function()
    local p = assert(testing.load(DIR))

    it("costs small messages about one token each", function()
        assert.equals(11, p:cost({ messages = 10, bytes = 500 }))
    end)

    it("costs large payloads one more token per 16 KiB", function()
        assert.equals(1 + 64, p:cost({ messages = 1, bytes = 1048576 }))
        assert.is_true(p:cost({ messages = 1, bytes = 1048576 })
                       > p:cost({ messages = 10, bytes = 500 }))
    end)
end)
