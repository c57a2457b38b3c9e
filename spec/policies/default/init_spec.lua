local testing = require("ephd.testing")
local helper = require("helper")

describe("policies/default", function()
    local p = assert(testing.load(helper.root .. "/policies/default"))

    it("lets every request through as the request's tenant", function()
        assert.is_nil(p:authenticate({ route = "push" }))
        assert.is_nil(p:paused(testing.request({})))
    end)

    it("takes limits from the knobs, or the grant's columns", function()
        local d = { rate = 10, burst = 20, max_parked = 30 }
        assert.same({ rate = 10, burst = 20, max_parked = 30 },
                    p:limits("t", nil, d))
        assert.same({ rate = 7, burst = 20, max_bytes = 100, max_queues = 3,
                      max_parked = 30 },
                    p:limits("t", { enabled = true, max_bytes = 100,
                                    max_queues = 3, max_msgs_per_sec = 7 }, d))
    end)

    it("costs a push one token per message", function()
        assert.equals(12, p:cost({ messages = 12, bytes = 99999 }))
    end)
end)
