-- A quiet-hours kill switch: every route of the family answers 503
-- ephemeral_disabled between settings.start and settings.stop (UTC hours),
-- with Retry-After counting down to the end of the quiet period.
local SETTINGS = { start = 2, stop = 4 }

local function quiet(now)
    local day = now % 86400
    local hour = math.floor(day / 3600)
    if SETTINGS.start <= hour and hour < SETTINGS.stop then
        return SETTINGS.stop * 3600 - day
    end
end

return {
    name = "quiet-hours",
    version = 1,
    settings = SETTINGS,
    schema = { start = "number", stop = "number" },
    hooks = {
        paused = function(request)
            local left = quiet(ephd.now())
            if left then
                return math.ceil(left), "quiet hours, back at "
                       .. SETTINGS.stop .. ":00 UTC"
            end
        end,
    },
}
