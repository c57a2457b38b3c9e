local helper = require("helper")

describe("ephd.metering", function()
    local metering
    before_each(function()
        helper.core_double({
            ephd_ffi_tenant_stats = function(t, _, out)
                if t ~= "t1" then return -3 end
                out.pushed, out.delivered, out.dropped_retry = 4, 6, 1
                return 0
            end,
            ephd_ffi_tenant_next = function(pos, name, out)
                local names = { "zz", "aa" }
                local n = names[tonumber(pos[0]) + 1]
                if not n then return -3 end
                pos[0] = pos[0] + 1
                name.ptr, name.len = n, #n
                out.pushed = #n
                return 0
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

    it("calls back once per tenant", function()
        local seen = {}
        metering.each(function(tenant, t) seen[tenant] = t.pushed end)
        assert.same({ zz = 2, aa = 2 }, seen)
    end)
end)

describe("ephd.metering.top", function()
    local metering, tenants

    before_each(function()
        tenants = {}
        helper.core_double({
            ephd_ffi_tenant_next = function(pos, name, out)
                local t = tenants[tonumber(pos[0]) + 1]
                if not t then return -3 end
                pos[0] = pos[0] + 1
                name.ptr, name.len = t[1], #t[1]
                out.bytes = t[2]
                return 0
            end,
        })
        metering = require("ephd.metering")
    end)

    it("keeps the biggest holders, most first, and counts them all",
       function()
        for i = 1, 1000 do
            -- Bytes in a scrambled order, so the heap has work to do.
            tenants[i] = { ("t%04d"):format(i), (i * 7919) % 1000 }
        end
        local top, total = metering.top(5)
        assert.equals(1000, total)
        local bytes = {}
        for i, t in ipairs(top) do bytes[i] = t.bytes end
        assert.same({ 999, 998, 997, 996, 995 }, bytes)
    end)

    it("breaks ties in what it shows by tenant", function()
        tenants = { { "b", 1 }, { "c", 5 }, { "a", 1 } }
        local top = metering.top(10)
        assert.same({ "c", "a", "b" }, { top[1].tenant, top[2].tenant,
                                         top[3].tenant })
    end)

    it("answers an empty broker", function()
        local top, total = metering.top(3)
        assert.same({}, top)
        assert.equals(0, total)
    end)
end)
