local helper = require("helper")

describe("ephd.validate", function()
    local validate
    before_each(function()
        helper.core_double({})
        validate = require("ephd.validate")
    end)

    it("takes names of 1 to 512 bytes without control characters", function()
        assert.equals("q", validate.name("q", "queue"))
        assert.equals(("x"):rep(512), validate.name(("x"):rep(512), "queue"))
        -- C1 controls are two UTF-8 bytes, C2 80 to C2 9F (U+0085 is NEL).
        for _, bad in ipairs({ "", ("x"):rep(513), "a\0b", "a\1", "a\31",
                               "a\127", "line\n", "a\194\133b",
                               "\194\128", "\194\159" }) do
            local ok, err = validate.name(bad, "queue")
            assert.is_nil(ok)
            assert.truthy(err:find("queue", 1, true))
        end
        assert.is_nil((validate.name(nil, "group")))
    end)

    it("accepts multibyte UTF-8 in names", function()
        assert.equals("café", validate.name("café", "queue"))
        for _, good in ipairs({ "\194\160", "\223\191", "\224\160\128",
                                "\237\159\191", "\238\128\128",
                                "\240\144\128\128", "\244\143\191\191",
                                "日本", "😀" }) do
            assert.equals(good, validate.name(good, "queue"))
        end
    end)

    -- A percent-decoded name arrives here unchecked (the JSON scanner
    -- checks the names it walks).
    it("refuses names that are not strict UTF-8", function()
        for _, bad in ipairs({
            "\128", "caf\233", "\192\128", "\193\191", "\224\128\128",
            "\240\128\128\128", "\237\160\128", "\237\191\191",
            "\244\144\128\128", "\245\128\128\128", "\255",
            "a\195", "a\230\151", "\240\159\152",
        }) do
            local ok, err = validate.name(bad, "partition")
            assert.is_nil(ok, bad)
            assert.equals("partition is not UTF-8 (RFC 3629)", err)
        end
    end)

    it("parses booleans as Queen spells them, and nothing else", function()
        for _, v in ipairs({ "true", "1", "yes" }) do
            assert.is_true(validate.boolean(v, "wait"))
        end
        for _, v in ipairs({ "false", "0", "no" }) do
            assert.is_false(validate.boolean(v, "wait"))
        end
        assert.equals("d", validate.boolean(nil, "wait", "d"))
        for _, v in ipairs({ "", "YES", "True", "on", "2" }) do
            local ok, err = validate.boolean(v, "wait")
            assert.is_nil(ok)
            assert.equals("wait must be true, 1, yes, false, 0 or no", err)
        end
    end)

    it("parses non-negative integers written in digits only", function()
        assert.equals(0, validate.integer("0", "batch"))
        assert.equals(250, validate.integer("250", "batch"))
        assert.equals(7, validate.integer(nil, "batch", 7))
        for _, bad in ipairs({ "", "-1", "1.5", "1e3", " 1", "0x10",
                               "+1", "1_000" }) do
            assert.is_nil((validate.integer(bad, "batch")), bad)
        end
    end)

    -- Past 15 digits they are still non-negative integers, for the caller
    -- to clamp; past a double's range they are infinity, which clamps too.
    it("parses integers of any length", function()
        assert.equals(1234567890123456, validate.integer("1234567890123456",
                                                         "batch"))
        assert.equals(12, validate.integer("000000000000000000012", "batch"))
        assert.equals(2 ^ 64, validate.integer("18446744073709551616",
                                               "timeout"))
        assert.equals(math.huge, validate.integer(("9"):rep(400), "timeout"))
        assert.equals(10000, validate.clamp(validate.integer(("9"):rep(40),
                                            "batch"), 1, 10000))
    end)

    it("clamps", function()
        assert.equals(1, validate.clamp(0, 1, 10))
        assert.equals(10, validate.clamp(11, 1, 10))
        assert.equals(5, validate.clamp(5, 1, 10))
    end)

    it("parses a query, ignoring unknown keys and refusing repeated ones",
       function()
        local known = { queue = true, batch = true }
        assert.same({ queue = "q", batch = "2" },
                    validate.query("queue=q&batch=2", known))
        assert.same({ queue = "" }, validate.query("queue=&&", known))
        assert.same({ queue = "q" },
                    validate.query("queue=q&bacth=2&%zz=%zz&x", known))
        assert.is_nil((validate.query("queue=a&queue=b", known)))
    end)

    it("refuses unknown keys where strict", function()
        local known = { queue = true, batch = true }
        assert.same({ queue = "q" }, validate.query("queue=q", known, true))
        local ok, err = validate.query("queue=q&bacth=2", known, true)
        assert.is_nil(ok)
        assert.truthy(err:find("bacth", 1, true))
        assert.truthy(err:find("batch, queue", 1, true))
        assert.is_nil((validate.query("queue=q&%zz=1", known, true)))
    end)

    it("decodes percent-escapes once, '+' as a space only in queries",
       function()
        assert.equals("a b/c", validate.unescape("a%20b%2Fc", false))
        assert.equals("%41", validate.unescape("%2541", false))
        assert.equals("a b", validate.unescape("a+b", true))
        assert.equals("a+b", validate.unescape("a+b", false))
        assert.is_nil((validate.unescape("a%4", false)))
        assert.same({ queue = "a b", group = "x&y" },
                    validate.query("queue=a+b&group=x%26y",
                                   { queue = true, group = true }))
    end)

    it("hands percent-escapes to C and plain names to nobody", function()
        local calls = {}
        helper.core_double({
            ephd_ffi_url_decode = function(s, n, out, plus)
                calls[#calls + 1] = { s, n, plus }
                return -1
            end,
        })
        validate = require("ephd.validate")
        assert.equals("plain", validate.unescape("plain", true))
        assert.equals(0, #calls)
        assert.is_nil((validate.unescape("a%zz", false)))
        assert.same({ { "a%zz", 4, 0 } }, calls)
        validate.unescape("a+b", true)
        assert.equals(1, calls[2][3])
    end)
end)
