local access = require("ephd.access")

describe("ephd.access", function()
    it("gives every route the contract's level", function()
        assert.equals("write-only", access.ROUTES.push)
        for _, r in ipairs({ "pop", "ack", "configure", "reset", "delete" }) do
            assert.equals("read-write", access.ROUTES[r], r)
        end
        assert.equals("read-only", access.ROUTES.queues)
        assert.equals("read-only", access.ROUTES.depth)
        for _, r in ipairs({ "system_status", "system_switch",
                             "policy_reload", "metering" }) do
            assert.equals("admin", access.ROUTES[r], r)
        end
    end)

    it("lets each level do exactly its share", function()
        assert.is_true(access.allows("write-only", "push"))
        assert.is_false(access.allows("write-only", "pop"))
        assert.is_false(access.allows("write-only", "queues"))
        assert.is_true(access.allows("read-only", "depth"))
        assert.is_false(access.allows("read-only", "push"))
        assert.is_false(access.allows("read-only", "reset"))
        assert.is_true(access.allows("read-write", "push"))
        assert.is_true(access.allows("read-write", "delete"))
        assert.is_false(access.allows("read-write", "system_switch"))
        assert.is_true(access.allows("admin", "system_switch"))
        assert.is_false(access.allows("root", "push"))
    end)
end)
