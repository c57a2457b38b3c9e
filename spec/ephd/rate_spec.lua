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
