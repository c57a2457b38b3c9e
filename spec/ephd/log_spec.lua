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

    it("cuts an operator's long text before a character, saying how long",
       function()
        assert.equals("short", log.excerpt("short"))
        assert.equals("12", log.excerpt(12))
        local cut = log.excerpt(string.rep("x", 600))
        assert.equals(string.rep("x", 512) .. "... (600 bytes)", cut)
        -- An accented e is two bytes: cut at 512, it would be split.
        local accented = string.rep("x", 511) .. "\xc3\xa9" .. string.rep("y", 100)
        assert.equals(string.rep("x", 511) .. "... (613 bytes)",
                      log.excerpt(accented))
    end)

    it("keeps scalar fields with plain keys only", function()
        assert.equals("a=1 b=true",
                      log.fields({ a = 1, b = true, c = {}, ["bad key"] = 2,
                                   [3] = "x" }))
        assert.equals('empty=""', log.fields({ empty = "" }))
    end)
end)
