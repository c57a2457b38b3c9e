local helper = require("helper")

describe("ephd.tenancy", function()
    local T = "2b1f0c7e-5f0a-4c9e-9a43-1d2e3f4a5b6c"

    it("uses the default tenant when the header is off", function()
        helper.core_double({}, { tenancy_header = 0 })
        local tenancy = require("ephd.tenancy")
        local req = helper.request({ tenant = T })
        assert.equals(tenancy.DEFAULT, tenancy.tenant(req))
    end)

    it("takes the tenant from x-queen-tenant when the header is on",
       function()
        helper.core_double({}, { tenancy_header = 1 })
        local tenancy = require("ephd.tenancy")
        assert.equals(T, tenancy.tenant(helper.request({ tenant = T:upper() })))
        assert.equals(tenancy.DEFAULT, tenancy.tenant(helper.request({})))
        local ok, err = tenancy.tenant(helper.request({ tenant = "nope" }))
        assert.is_nil(ok)
        assert.truthy(err:find("UUID", 1, true))
    end)
end)
