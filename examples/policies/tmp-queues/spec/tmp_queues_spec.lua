local testing = require("ephd.testing")

local DIR = (os.getenv("EPHD_SOURCE_DIR") or ".")
            .. "/examples/policies/tmp-queues"

describe("examples/policies/tmp-queues", function()
    local p = assert(testing.load(DIR))

    it("refuses a push to a tmp-* queue, with its reason", function()
        local code, message = p:admit({ queue = "tmp-1", messages = 3 })
        assert.equals("ephemeral_quota_exceeded", code)
        assert.matches("tmp%-%*", message)
    end)

    it("admits pushes to other queues, and pops of tmp-* ones", function()
        assert.is_nil(p:admit({ queue = "orders" }))
        assert.is_nil(p:admit({ queue = "temp-1" }))
        assert.is_nil(p:admit({ route = "pop", queue = "tmp-1",
                                group = "g" }))
    end)
end)
