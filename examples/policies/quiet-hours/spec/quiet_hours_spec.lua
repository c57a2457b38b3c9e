local testing = require("ephd.testing")

local DIR = (os.getenv("EPHD_SOURCE_DIR") or ".")
            .. "/examples/policies/quiet-hours"

local function at(hour, minute)
    return function() return 86400 * 1000 + hour * 3600 + minute * 60 end
end

describe("examples/policies/quiet-hours", function()
    it("pauses between 02:00 and 04:00 UTC, counting down", function()
        local p = assert(testing.load(DIR, { now = at(3, 30) }))
        local after, reason = p:paused(testing.request({}))
        assert.equals(30 * 60, after)
        assert.truthy(reason:find("4:00", 1, true))
    end)

    it("serves outside the quiet hours", function()
        for _, t in ipairs({ at(1, 59), at(4, 0), at(12, 0) }) do
            local p = assert(testing.load(DIR, { now = t }))
            assert.is_nil(p:paused(testing.request({})))
        end
    end)
end)
