local rate = require("ephd.rate")

describe("ephd.rate", function()
    before_each(rate.reset)

    it("lets a burst through, then refuses with an honest Retry-After",
       function()
        assert.is_true(rate.take("t", 10, 5, 10, 0))
        local ok, wait = rate.take("t", 5, 5, 10, 0)
        assert.is_false(ok)
        assert.equals(1, wait) -- five tokens short at five a second
        ok, wait = rate.take("t", 10, 5, 10, 0)
        assert.equals(2, wait)
    end)

    it("refills with time, up to the burst", function()
        assert.is_true(rate.take("t", 10, 5, 10, 0))
        assert.is_true(rate.take("t", 5, 5, 10, 1000))
        assert.is_false((rate.take("t", 1, 5, 10, 1000)))
        assert.is_true(rate.take("t", 10, 5, 10, 60000))
    end)

    it("keeps tenants apart", function()
        assert.is_true(rate.take("a", 10, 5, 10, 0))
        assert.is_true(rate.take("b", 10, 5, 10, 0))
    end)

    it("refuses a cost above the burst, even from a full bucket", function()
        local ok, wait, too_big = rate.take("t", 25, 5, 10, 0)
        assert.is_false(ok)
        assert.is_true(too_big)
        assert.equals(1, wait) -- the bucket is full: a split push passes
        assert.is_true(rate.take("t", 10, 5, 10, 0))
        ok, wait, too_big = rate.take("t", 25, 5, 10, 0)
        assert.equals(2, wait) -- ten tokens to refill at five a second
        assert.is_true(too_big)
    end)

    it("words its refusals for the live ladder and a shadow alike",
       function()
        assert.equals("the tenant is over its rate of 1 message per second",
                      rate.over_rate(1))
        assert.equals("the tenant is over its rate of 5 messages per "
                      .. "second", rate.over_rate(5))
        assert.equals("the push costs 12, more than the tenant's burst of "
                      .. "10: no retry can pass it; split it into pushes "
                      .. "that cost at most 10", rate.over_burst(12, 10, 3))
        -- One message (a cost hook's price) cannot be split.
        assert.equals("the push costs 12, more than the tenant's burst of "
                      .. "10: no retry can pass it, and one message cannot "
                      .. "be split", rate.over_burst(12, 10, 1))
    end)

    it("lets a cost of nothing through, even in debt", function()
        assert.is_true(rate.take("t", 10, 5, 10, 0))
        assert.is_false((rate.take("t", 1, 5, 10, 0)))
        assert.is_true(rate.take("t", 0, 5, 10, 0))
    end)

    it("does not limit at rate 0", function()
        for _ = 1, 100 do assert.is_true(rate.take("t", 1000, 0, 1, 0)) end
    end)

    it("refunds what a refused push took", function()
        assert.is_true(rate.take("t", 10, 5, 10, 0))
        rate.refund("t", 10)
        assert.is_true(rate.take("t", 10, 5, 10, 0))
    end)
end)
