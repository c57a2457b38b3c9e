local router = require("ephd.router")

describe("ephd.router route ids", function()
    it("numbers every route the router can answer, for the metrics", function()
        local named = {}
        for i, name in ipairs(router.NAMES) do
            assert.equals(i, router.ID[name])
            named[name] = true
        end
        assert.is_true(#router.NAMES < 24) -- C keeps 24 slots, 0 is "none"
        for _, path in ipairs({ "/api/v1/ephemeral/push",
                                "/api/v1/system/ephemeral", "/metrics",
                                "/health", "/ready" }) do
            for _, method in ipairs({ "GET", "POST" }) do
                local name = router.route(method, path)
                if name then assert.is_true(named[name], name) end
            end
        end
    end)
end)
