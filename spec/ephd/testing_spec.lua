local helper = require("helper")
local testing = require("ephd.testing")

describe("ephd.testing", function()
    it("finds the default policy of the tree it comes from", function()
        assert.equals(helper.root .. "/policies/default",
                      (testing.default_dir():gsub("/lua/ephd/%.%./%.%.", "")))
    end)

    it("reads a directory's modules and nothing else", function()
        local files = testing.read(helper.root
                                   .. "/examples/policies/bearer-tokens")
        assert.is_string(files.init)
        assert.is_string(files.tokens)
        assert.is_nil(files.spec)
    end)

    it("reports a directory that does not load", function()
        local p, err = testing.load("/nonexistent")
        assert.is_nil(p)
        assert.truthy(err:find("init.lua is missing", 1, true))
    end)

    it("builds the request hooks see", function()
        assert.same({ route = "pop", method = "POST",
                      path = "/api/v1/ephemeral/push",
                      tenant = "00000000-0000-0000-0000-000000000001",
                      authorization = "" }, testing.request({ route = "pop" }))
    end)
end)
