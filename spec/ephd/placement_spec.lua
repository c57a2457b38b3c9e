-- ephd.placement, the Lua copy of the cell's hash a client routes by: it
-- must agree with core/cell/placement.c, so it is held to the vectors
-- test/test_placement.c pins (computed apart from either, from
-- placement.h's description), and to placement's own rules.
local placement = require("ephd.placement")

local hex, id = placement.hex, placement.id
local T = "00000000-0000-0000-0000-000000000001"

describe("ephd.placement", function()
    it("computes test_placement.c's pinned vectors", function()
        assert.equals("365afc61535b3920", hex(placement.key("", "", "")))
        local key = placement.key(T, "presence", "Default")
        assert.equals("bc7d23cb9482c7c8", hex(key))
        assert.equals("4e0fcd7162342871", hex(placement.score(1ULL, 2ULL)))
        assert.equals("e82a82d757d0296e",
                      hex(placement.score(id("0123456789abcdef"), key)))
        local members = { { id = id("0123456789abcdef") },
                          { id = id("1111111111111111") },
                          { id = id("fedcba9876543210") } }
        assert.equals(members[1],
                      placement.owner(members, T, "presence", "Default"))
    end)

    it("places a thousand keys as test_placement.c's "
       .. "placement_owners_of_keys does", function()
        local members = { { id = id("0123456789abcdef") },
                          { id = id("1111111111111111") },
                          { id = id("fedcba9876543210") } }
        local index = { [members[1]] = 0, [members[2]] = 1,
                        [members[3]] = 2 }
        local count, first = { [0] = 0, 0, 0 }, {}
        for i = 0, 999 do
            local o = index[placement.owner(
                members, ("00000000-0000-0000-0000-00000000000%d"):format(i % 3),
                "q" .. i % 100, "room-" .. i)]
            count[o] = count[o] + 1
            if i < 40 then first[#first + 1] = o end
        end
        assert.equals("1112212111110001212001112001201210211221",
                      table.concat(first))
        assert.same({ [0] = 337, 330, 333 }, count)
    end)

    it("frames the names by their lengths", function()
        local a = hex(placement.key("ab", "c", "p"))
        assert.not_equals(a, hex(placement.key("a", "bc", "p")))
        assert.not_equals(a, hex(placement.key("abc", "", "p")))
        assert.not_equals(hex(placement.key("t", "q", "p")),
                          hex(placement.key("t", "q", "p\0")))
    end)

    it("reads ids as the cell shows them, and nothing else", function()
        assert.equals("fedcba9876543210", hex(id("fedcba9876543210")))
        assert.equals("00000000000000ff", hex(id("00000000000000FF")))
        for _, bad in ipairs({ "fedcba987654321", "fedcba98765432100",
                               "fedcba987654321g", "", 42 }) do
            assert.is_nil(id(bad), tostring(bad))
        end
    end)

    it("gives equal scores to the smaller id, and a cell of one its "
       .. "member unhashed", function()
        local one = { { id = id("0000000000000001") } }
        assert.equals(one[1], placement.owner(one, T, "q", "p"))
        -- The same id twice scores alike: the first (smaller or equal)
        -- stays, as the C rule keeps it.
        local twins = { { id = id("0000000000000002") },
                        { id = id("0000000000000002") } }
        assert.equals(twins[1], placement.owner(twins, T, "q", "p"))
    end)

    it("spreads keys over the members, whatever their order", function()
        local members = { { id = id("1d5e0f8a9b2c3d4e") },
                          { id = id("7a6b5c4d3e2f1a0b") },
                          { id = id("c0ffee0123456789") } }
        local reversed = { members[3], members[2], members[1] }
        local count = {}
        for i = 1, 3000 do
            local p = "room-" .. i
            local o = placement.owner(members, T, "q" .. i % 10, p)
            assert.equals(o, placement.owner(reversed, T, "q" .. i % 10, p))
            count[o] = (count[o] or 0) + 1
        end
        for _, m in ipairs(members) do
            assert.is_true(count[m] > 800 and count[m] < 1200)
        end
    end)
end)
