local access = require("ephd.access")

describe("ephd.access", function()
    it("knows the contract's levels and nothing else", function()
        for _, level in ipairs({ "admin", "read-write", "read-only",
                                 "write-only" }) do
            assert.is_true(access.is_level(level), level)
        end
        assert.is_false(access.is_level("root"))
    end)

    it("lets each level do exactly its share", function()
        assert.is_true(access.allows("write-only", "write-only"))
        assert.is_false(access.allows("write-only", "read-write"))
        assert.is_false(access.allows("write-only", "read-only"))
        assert.is_true(access.allows("read-only", "read-only"))
        assert.is_false(access.allows("read-only", "write-only"))
        assert.is_false(access.allows("read-only", "read-write"))
        assert.is_true(access.allows("read-write", "write-only"))
        assert.is_true(access.allows("read-write", "read-only"))
        assert.is_true(access.allows("read-write", "read-write"))
        assert.is_false(access.allows("read-write", "admin"))
        assert.is_true(access.allows("admin", "admin"))
        assert.is_false(access.allows("root", "write-only"))
    end)

    it("lets every level, and only a level, read a route any identity "
       .. "may", function()
        for _, level in ipairs({ "admin", "read-write", "read-only",
                                 "write-only" }) do
            assert.is_true(access.allows(level, access.ANY), level)
        end
        assert.is_false(access.allows("root", access.ANY))
        assert.is_false(access.allows(nil, access.ANY))
        -- A route may ask for it; no credential holds it.
        assert.is_true(access.is_route_level(access.ANY))
        assert.is_false(access.is_level(access.ANY))
    end)
end)
