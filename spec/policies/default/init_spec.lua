local helper = require("helper")
local policy = require("ephd.policy")

describe("policies/default", function()
    it("lets every request through", function()
        local p = assert(policy.load(helper.root .. "/policies/default"))
        assert.is_nil(p.hooks.authenticate({ route = "push",
                                             tenant = "t",
                                             authorization = "" }))
    end)
end)
