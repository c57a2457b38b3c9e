local testing = require("ephd.testing")

local DIR = (os.getenv("EPHD_SOURCE_DIR") or ".")
            .. "/examples/policies/presence"

describe("examples/policies/presence", function()
    local p = assert(testing.load(DIR))

    it("gives presence-* queues three messages for 30 seconds", function()
        assert.same({ maxLength = 3, ttlSeconds = 30 },
                    p:queue_options(nil, "presence-room1"))
    end)

    it("leaves other queues the broker's defaults", function()
        assert.is_nil(p:queue_options(nil, "orders"))
        assert.is_nil(p:queue_options(nil, "room1-presence"))
    end)
end)
