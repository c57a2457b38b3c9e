local testing = require("ephd.testing")

local DIR = (os.getenv("EPHD_SOURCE_DIR") or ".")
            .. "/examples/policies/plan-tiers"

describe("examples/policies/plan-tiers", function()
    local p = assert(testing.load(DIR))

    it("puts unknown tenants on the free plan", function()
        local l = p:limits("99999999-9999-9999-9999-999999999999", nil)
        assert.equals(100, l.rate)
        assert.equals(10, l.max_queues)
        assert.equals(10, l.max_parked)
    end)

    it("gives pro tenants the pro limits", function()
        local l = p:limits("11111111-1111-1111-1111-111111111111", nil)
        assert.equals(1000000, l.rate)
        assert.equals(268435456, l.max_bytes)
    end)

    it("lets a grant row's columns override the plan", function()
        local l = p:limits("99999999-9999-9999-9999-999999999999",
                           { enabled = true, max_msgs_per_sec = 7,
                             max_queues = 2 })
        assert.equals(7, l.rate)
        assert.equals(7, l.burst)
        assert.equals(2, l.max_queues)
        assert.equals(1048576, l.max_bytes)
    end)

    it("keeps the default policy's other hooks", function()
        assert.equals(3, p:cost({ messages = 3, bytes = 10 }))
        assert.is_nil(p:authenticate({}))
    end)
end)
