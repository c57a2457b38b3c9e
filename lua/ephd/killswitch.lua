-- The operator's kill switch: while the surface is paused every route of
-- the family answers 503 ephemeral_disabled with Retry-After, before any
-- other check, so a paused surface says nothing about any tenant. State
-- lives here, outside the policy, so a reload does not unpause.
local _M = {}

local state = { paused = false, retry_after = nil, reason = nil, since = nil }

function _M.state()
    return state
end

-- The rungs' reading (ephd.rungs): the reason and the Retry-After the
-- operator set (nil: the broker's), or nil while the surface is on.
function _M.paused()
    local s = state
    if s.paused then
        return s.reason or "the ephemeral surface is paused", s.retry_after
    end
end

function _M.set(paused, retry_after, reason, now)
    state = {
        paused = paused,
        retry_after = paused and retry_after or nil,
        reason = paused and reason or nil,
        since = now,
    }
    return state
end

return _M
