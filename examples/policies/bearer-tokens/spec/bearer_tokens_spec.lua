local testing = require("ephd.testing")

local DIR = (os.getenv("EPHD_SOURCE_DIR") or ".")
            .. "/examples/policies/bearer-tokens"

describe("examples/policies/bearer-tokens", function()
    local p = assert(testing.load(DIR))

    it("maps a known token to its tenant and level", function()
        assert.same({ tenant = "11111111-1111-1111-1111-111111111111",
                      level = "write-only" },
                    p:authenticate({ authorization = "Bearer producer-token" }))
    end)

    it("answers unauthorized for a missing or unknown token", function()
        for _, auth in ipairs({ "", "Basic abc", "Bearer", "Bearer nope" }) do
            local who, reason = p:authenticate({ authorization = auth })
            assert.equals("unauthorized", who, auth)
            assert.is_string(reason)
        end
    end)
end)
