local helper = require("helper")

describe("ephd.options", function()
    local options
    before_each(function()
        helper.core_double({})
        options = require("ephd.options")
    end)
    it("accepts every option of the closed list", function()
        local o = { maxBytes = 1048576, maxLength = 1000, policy = "dropOldest",
                    ttlSeconds = 30, leaseSeconds = 15, retryLimit = 3,
                    windowBuffer = { ms = 20, count = 50 } }
        assert.equals(o, options.check(o))
        assert.same({}, options.check(nil))
        assert.same({}, options.check({}))
    end)

    it("takes a null windowBuffer as off, as the status reads publish it",
       function()
        assert.same({}, options.check({ windowBuffer = require("cjson").null }))
    end)

    it("names the options that exist when a key is unknown", function()
        local ok, err = options.check({ ttlSecond = 1 })
        assert.is_nil(ok)
        assert.truthy(err:find("ttlSecond", 1, true))
        assert.truthy(err:find(table.concat(options.KEYS, ", "), 1, true))
    end)

    it("takes non-negative integers only", function()
        for _, v in ipairs({ 1.5, -1, "3", true, 0 / 0, -math.huge }) do
            assert.is_nil((options.check({ ttlSeconds = v })))
        end
        assert.truthy(options.check({ ttlSeconds = 0 }))
    end)

    -- lua-cjson reads them as doubles that lost digits (or as infinity);
    -- they are integers still, stored as sent and clamped in force.
    it("takes integers above 2^53 and clamps them in force", function()
        local ffi = require("ffi")
        local config = require("ephd.core").config
        local raw = '{"maxBytes":18446744073709551616,"maxLength":'
                    .. ("9"):rep(400) .. ',"ttlSeconds":9007199254740993,'
                    .. '"windowBuffer":{"ms":99999999999999999999,'
                    .. '"count":99999999999999999999}}'
        local o = options.check(require("cjson").decode(raw), raw)
        assert.truthy(o)
        local out = options.in_force(o, config, ffi.new("ephd_options_t"))
        assert.equals(tonumber(config.defaults.max_bytes),
                      tonumber(out.max_bytes))
        assert.equals(tonumber(config.defaults.max_length),
                      tonumber(out.max_length))
        assert.equals(options.CEILINGS.ttlSeconds, tonumber(out.ttl_s))
        assert.equals(options.CEILINGS.windowMs, tonumber(out.window_ms))
        assert.equals(options.CEILINGS.windowCount,
                      tonumber(out.window_count))
    end)

    it("takes only integer literals when given the raw JSON", function()
        local function check(raw)
            return options.check(require("cjson").decode(raw), raw)
        end
        assert.is_nil((check('{"ttlSeconds":1.0}')))
        assert.is_nil((check('{"maxLength":1e3}')))
        assert.is_nil((check('{"windowBuffer":{"ms":2.0,"count":1}}')))
        assert.truthy(check('{"ttlSeconds":10,"windowBuffer":{"ms":2,'
                            .. '"count":1}}'))
    end)

    it("clamps to the values in force, defaults filling the gaps", function()
        local ffi = require("ffi")
        local config = require("ephd.core").config
        local out = options.in_force({ maxBytes = 2 ^ 40, leaseSeconds = 0,
                                       windowBuffer = { ms = 10 ^ 7,
                                                        count = 3 } },
                                     config, ffi.new("ephd_options_t"))
        -- QUEEN_EPHEMERAL_QUEUE_MAX_BYTES is the default and the ceiling.
        assert.equals(tonumber(config.defaults.max_bytes),
                      tonumber(out.max_bytes))
        assert.equals(30, tonumber(out.lease_s)) -- 0 is the default
        assert.equals(10000, tonumber(out.max_length))
        assert.equals(0, out.drop_oldest)
        assert.equals(5, tonumber(out.retry_limit))
        assert.equals(60000, tonumber(out.window_ms))
        assert.equals(3, tonumber(out.window_count))
    end)

    it("takes 0 as the default for maxBytes, maxLength and leaseSeconds, "
       .. "and clamps to QUEEN_EPHEMERAL_QUEUE_MAX_* ", function()
        local ffi = require("ffi")
        local config = require("ephd.core").config
        local d = config.defaults
        local out = options.in_force({ maxBytes = 0, maxLength = 0,
                                       leaseSeconds = 0, ttlSeconds = 0,
                                       retryLimit = 0 },
                                     config, ffi.new("ephd_options_t"))
        assert.equals(tonumber(d.max_bytes), tonumber(out.max_bytes))
        assert.equals(tonumber(d.max_length), tonumber(out.max_length))
        assert.equals(tonumber(d.lease_s), tonumber(out.lease_s))
        assert.equals(0, tonumber(out.ttl_s))
        assert.equals(0, tonumber(out.retry_limit))
        out = options.in_force({ maxLength = 10000000, maxBytes = 2 ^ 28,
                                 windowBuffer = { ms = 500, count = 0 } },
                               config, ffi.new("ephd_options_t"))
        assert.equals(tonumber(d.max_bytes), tonumber(out.max_bytes))
        assert.equals(tonumber(d.max_length), tonumber(out.max_length))
        assert.equals(0, tonumber(out.window_ms)) -- count 0: off
        out = options.in_force({ windowBuffer = { ms = 0, count = 5 } },
                               config, ffi.new("ephd_options_t"))
        assert.equals(0, tonumber(out.window_count)) -- ms 0: off
        assert.equals(0, tonumber(out.window_ms))
        out = options.in_force({ maxLength = 7, maxBytes = 9 }, config,
                               ffi.new("ephd_options_t"))
        assert.equals(9, tonumber(out.max_bytes))
        assert.equals(7, tonumber(out.max_length))
    end)

    it("takes reject or dropOldest as policy", function()
        assert.is_nil((options.check({ policy = "drop" })))
        assert.truthy(options.check({ policy = "reject" }))
    end)

    it("takes windowBuffer as {ms, count} and nothing else", function()
        assert.is_nil((options.check({ windowBuffer = 5 })))
        assert.is_nil((options.check({ windowBuffer = { ms = 1 } })))
        assert.is_nil((options.check({ windowBuffer = { ms = 1, count = 2,
                                                        max = 3 } })))
        assert.is_nil((options.check({ windowBuffer = { ms = 1.5, count = 2 } })))
    end)
end)
