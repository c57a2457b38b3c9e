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

    it("builds the request admit sees: counts for a push alone", function()
        assert.same({ route = "push", tenant = testing.TENANT,
                      level = "read-write", queue = "q",
                      partition = "Default", messages = 1, bytes = 0 },
                    testing.admission())
        assert.same({ route = "pop", tenant = testing.TENANT,
                      level = "read-only", queue = "r", group = "g" },
                    testing.admission({ route = "pop", level = "read-only",
                                        queue = "r", group = "g" }))
    end)

    -- A policy whose hooks answer what each spec sets in `answer`.
    local function answering(answer)
        local dir = os.tmpname()
        os.remove(dir)
        assert(os.execute("mkdir -p " .. dir) == 0)
        local f = assert(io.open(dir .. "/init.lua", "w"))
        f:write("return { name = 'a', version = 1, "
                .. "hooks = { admit = function() return ANSWER() end, "
                .. "queue_options = function() return ANSWER() end } }")
        f:close()
        local p = assert(testing.load(dir))
        os.remove(dir .. "/init.lua")
        os.remove(dir)
        -- The sandbox's globals are the policy's own: reach them through
        -- a hook's environment.
        getfenv(p.policy.hooks.admit).ANSWER = function()
            return unpack(answer, 1, 3)
        end
        return p
    end

    it("checks admit's results as the broker does", function()
        local answer = {}
        local p = answering(answer)
        assert.is_nil(p:admit())
        answer[1], answer[2] = "queue_full", "full of presence"
        assert.same({ "queue_full", "full of presence" }, { p:admit() })
        answer[1], answer[2], answer[3] = "rate_limited", nil, 5
        local code, message, after = p:admit()
        assert.same({ "rate_limited", nil, 5 }, { code, message, after })
        for _, bad in ipairs({
            { { "gone" }, "not one of" },
            { { "queue_full", 3 }, "message must be a string" },
            { { "forbidden", "no", 5 }, "with rate_limited only" },
            { { "rate_limited", "x", 0 }, "from 1 to 86400" },
            { { "rate_limited", "x", 0 / 0 }, "from 1 to 86400" },
        }) do
            for i = 1, 3 do answer[i] = bad[1][i] end
            local ok, err = pcall(p.admit, p)
            assert.is_false(ok)
            assert.truthy(err:find(bad[2], 1, true), err)
        end
    end)

    it("checks queue_options' results as configure checks options",
       function()
        local answer = {}
        local p = answering(answer)
        assert.is_nil(p:queue_options())
        answer[1] = { maxLength = 3, ttlSeconds = 30, policy = "dropOldest",
                      windowBuffer = { ms = 10, count = 5 } }
        assert.equals(answer[1], p:queue_options(nil, "presence-1"))
        for _, bad in ipairs({
            { "3", "options must be an object" },
            { { maxLen = 3 }, "unknown option maxLen" },
            { { maxLength = -1 }, "maxLength must be a non-negative integer" },
            { { ttlSeconds = 1.5 }, "ttlSeconds must be a non-negative" },
            { { policy = "drop" }, "policy must be reject or dropOldest" },
            { { windowBuffer = { ms = 1 } },
              "windowBuffer needs both ms and count" },
        }) do
            answer[1] = bad[1]
            local ok, err = pcall(p.queue_options, p)
            assert.is_false(ok)
            assert.truthy(err:find("queue_options returned bad options: "
                                   .. bad[2], 1, true), err)
        end
    end)
end)
