local killswitch = require("ephd.killswitch")

describe("ephd.killswitch", function()
    it("starts enabled", function()
        assert.is_false(killswitch.state().paused)
    end)

    it("pauses with a retry and a reason, and unpauses clean", function()
        local s = killswitch.set(true, 12, "maintenance", 100)
        assert.same({ paused = true, retry_after = 12, reason = "maintenance",
                      since = 100 }, s)
        s = killswitch.set(false, 12, "ignored", 200)
        assert.same({ paused = false, since = 200 }, s)
    end)

    it("tells the rungs its reason and Retry-After while paused", function()
        assert.is_nil(killswitch.paused())
        killswitch.set(true, 12, "maintenance", 100)
        assert.same({ "maintenance", 12 }, { killswitch.paused() })
        killswitch.set(true, nil, nil, 100)
        assert.same({ "the ephemeral surface is paused" },
                    { killswitch.paused() })
        killswitch.set(false, nil, nil, 200)
        assert.is_nil(killswitch.paused())
    end)
end)
