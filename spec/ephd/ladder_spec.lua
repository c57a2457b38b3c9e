local helper = require("helper")

describe("ephd.ladder", function()
    local ladder, C
    before_each(function()
        C = helper.core_double({})
        ladder = require("ephd.ladder")
    end)

    it("states the refusal order, outermost first", function()
        local codes = {}
        for i, rung in ipairs(ladder.ORDER) do codes[i] = rung.code end
        assert.same({ "ephemeral_bad_request", "queue_full",
                      "ephemeral_unavailable" }, codes)
    end)

    it("picks the outer refusal when both budgets refuse", function()
        local both = bit.bor(C.EPHD_REFUSE_QUEUE_FULL, C.EPHD_REFUSE_CELL_BYTES)
        assert.equals("queue_full", (ladder.budget(both)))
        assert.equals("ephemeral_unavailable",
                      (ladder.budget(C.EPHD_REFUSE_CELL_BYTES)))
    end)

    it("treats bits it has no rung for as a programming error", function()
        assert.has_error(function() ladder.budget(0x100) end)
    end)
end)
