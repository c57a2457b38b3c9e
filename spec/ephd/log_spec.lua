local helper = require("helper")

describe("ephd.log", function()
    local log, lines
    before_each(function()
        lines = {}
        helper.core_double({
            ephd_ffi_log_fields = function(level, event, fields)
                lines[#lines + 1] = { level, event, fields }
            end,
        })
        log = require("ephd.log")
    end)

    it("writes sorted logfmt fields, quoting what needs it", function()
        log.warn("policy_hook_failed",
                 { hook = "cost", count = 3, error = 'a "b" = c\nd' })
        assert.same({ "warn", "policy_hook_failed",
                      'count=3 error="a \\"b\\" = c\\nd" hook=cost' },
                    lines[1])
    end)

    it("keeps scalar fields with plain keys only", function()
        assert.equals("a=1 b=true",
                      log.fields({ a = 1, b = true, c = {}, ["bad key"] = 2,
                                   [3] = "x" }))
        assert.equals('empty=""', log.fields({ empty = "" }))
    end)
end)
