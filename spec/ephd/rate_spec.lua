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

    it("lets a cost above the burst through from a full bucket, into "
       .. "debt", function()
        assert.is_true(rate.take("t", 25, 5, 10, 0))
        -- 15 in debt: the next message waits for a full bucket's worth.
        local ok, wait = rate.take("t", 1, 5, 10, 0)
        assert.is_false(ok)
        assert.equals(4, wait) -- -15 to 1 at five a second: 3.2 s
        assert.is_false((rate.take("t", 1, 5, 10, 3000)))
        assert.is_true(rate.take("t", 1, 5, 10, 3200))
        -- From a part-full bucket it waits until the bucket is full.
        ok, wait = rate.take("t", 25, 5, 10, 3200)
        assert.is_false(ok)
        assert.equals(2, wait) -- 0 to 10 at five a second
        assert.is_false((rate.take("t", 25, 5, 10, 5100)))
        assert.is_true(rate.take("t", 25, 5, 10, 5200))
    end)

    it("words its refusals for the live ladder and a shadow alike",
       function()
        assert.equals("the tenant is over its rate of 1 message per second",
                      rate.over_rate(1))
        assert.equals("the tenant is over its rate of 5 messages per "
                      .. "second", rate.over_rate(5, 5, 10))
        assert.equals("the tenant is over its rate of 5 messages per "
                      .. "second; this push costs 12, more than its burst "
                      .. "of 10: it passes from a full bucket",
                      rate.over_rate(5, 12, 10))
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
