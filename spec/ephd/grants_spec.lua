local grants = require("ephd.grants")

describe("ephd.grants", function()
    before_each(function()
        grants.replace({ on = { enabled = true, max_bytes = 5 },
                         off = { enabled = false } })
    end)

    it("gates a tenant whose row is off, whatever the knob", function()
        assert.is_true(grants.gated("off", false))
        assert.is_true(grants.gated("off", true))
    end)

    it("gates a tenant without a row only when grants are required",
       function()
        assert.is_false(grants.gated("none", false))
        assert.is_true(grants.gated("none", true))
        assert.is_false(grants.gated("on", true))
    end)

    it("replaces every row at once", function()
        assert.equals(5, grants.get("on").max_bytes)
        grants.replace({})
        assert.is_nil(grants.get("on"))
    end)
end)
