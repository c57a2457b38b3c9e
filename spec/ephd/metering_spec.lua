local helper = require("helper")

describe("ephd.metering", function()
    local metering
    before_each(function()
        helper.core_double({
            ephd_tenant_stats = function(t, _, out)
                if t ~= "t1" then return -3 end
                out.pushed, out.delivered, out.dropped_retry = 4, 6, 1
                return 0
            end,
            ephd_tenant_next = function(pos, name, out)
                local names = { "zz", "aa" }
                local n = names[tonumber(pos[0]) + 1]
                if not n then return 0 end
                pos[0] = pos[0] + 1
                name.ptr, name.len = n, #n
                out.pushed = #n
                return 1
            end,
        })
        metering = require("ephd.metering")
    end)

    it("reads one tenant's counters, drops by cause", function()
        local t = metering.of("t1")
        assert.equals(4, t.pushed)
        assert.equals(6, t.delivered)
        assert.same({ bounds = 0, ttl = 0, retry = 1 }, t.drops)
        assert.is_nil(metering.of("nobody"))
        assert.is_nil(metering.of(42))
    end)

    it("lists every tenant, sorted", function()
        local all = metering.all()
        assert.equals(2, #all)
        assert.equals("aa", all[1].tenant)
        assert.equals("zz", all[2].tenant)
    end)
end)
