-- The refusal ladder: when several refusals apply, the outermost one is the
-- answer, so it names the reason an operator would act on. The order is this
-- one list, pinned by spec/ephd/ladder_spec.lua.
local core = require("ephd.core")

local C = core.C
local band = require("bit").band

local _M = {}

-- Outermost first. Shape refusals are decided before any budget is looked
-- at; the budgets below are checked by C in one pass at commit and reported
-- together as bits, so the choice between them is made here.
_M.ORDER = {
    { code = "ephemeral_bad_request" },
    { code = "queue_full", bit = C.EPHD_REFUSE_QUEUE_FULL,
      message = "the queue is at maxBytes or maxLength and its policy "
                .. "is reject" },
    { code = "ephemeral_unavailable", bit = C.EPHD_REFUSE_CELL_BYTES,
      message = "the broker is at QUEEN_EPHEMERAL_MAX_BYTES" },
}

-- The outermost rung among the budget bits C reported.
function _M.budget(refusals)
    for i = 1, #_M.ORDER do
        local rung = _M.ORDER[i]
        if rung.bit and band(refusals, rung.bit) ~= 0 then
            return rung.code, rung.message
        end
    end
    error("no rung for refusal bits " .. tostring(refusals))
end

return _M
