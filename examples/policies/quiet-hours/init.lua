-- A quiet-hours kill switch: every route of the family answers 503
-- ephemeral_disabled between START and STOP (UTC hours), with Retry-After
-- counting down to the end of the quiet period. Change the hours here and
-- reload.
local START, STOP = 2, 4

local function quiet(now)
    local day = now % 86400
    local hour = math.floor(day / 3600)
    if START <= hour and hour < STOP then
        return STOP * 3600 - day
    end
end

return {
    name = "quiet-hours",
    version = 1,
    hooks = {
        paused = function(request)
            local left = quiet(ephd.now())
            if left then
                return math.ceil(left), "quiet hours, back at "
                       .. STOP .. ":00 UTC"
            end
        end,
    },
}
