local testing = require("ephd.testing")
local helper = require("helper")

describe("policies/default", function()
    local p = assert(testing.load(helper.root .. "/policies/default"))

    it("lets every request through as the request's tenant", function()
        assert.is_nil(p:authenticate({ route = "push" }))
        assert.is_nil(p:paused(testing.request({})))
    end)

    it("takes limits from the knobs, or the grant's columns", function()
        local d = { rate = 10, burst = 20, max_parked = 30, max_queues = 40 }
        assert.same({ rate = 10, burst = 20, max_parked = 30,
                      max_queues = 40 },
                    p:limits("t", nil, d))
        assert.same({ rate = 7, burst = 7, max_bytes = 100, max_queues = 3,
                      max_parked = 30 },
                    p:limits("t", { enabled = true, max_bytes = 100,
                                    max_queues = 3, max_msgs_per_sec = 7 }, d))
    end)

    it("bounds a grant's burst by its rate (Queen: rate = burst)",
       function()
        local d = { rate = 5000, burst = 10000, max_parked = 30,
                    max_queues = 40 }
        local l = p:limits("t", { enabled = true, max_msgs_per_sec = 5 }, d)
        assert.equals(5, l.rate)
        assert.equals(5, l.burst)
        -- A grant without a rate keeps the knobs' rate and burst, and the
        -- default queue allowance.
        l = p:limits("t", { enabled = true, max_bytes = 1 }, d)
        assert.equals(5000, l.rate)
        assert.equals(10000, l.burst)
        assert.equals(40, l.max_queues)
    end)

    it("costs a push one token per message", function()
        assert.equals(12, p:cost({ messages = 12, bytes = 99999 }))
    end)
end)
