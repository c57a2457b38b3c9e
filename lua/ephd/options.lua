-- configure's closed option list: what a declaration may say, checked
-- whole before anything is written.
local _M = {}

_M.KEYS = {
    "maxBytes", "maxLength", "policy", "ttlSeconds", "leaseSeconds",
    "retryLimit", "windowBuffer",
}
local KNOWN = {}
for _, k in ipairs(_M.KEYS) do KNOWN[k] = true end

local INTEGERS = {
    maxBytes = true, maxLength = true, ttlSeconds = true,
    leaseSeconds = true, retryLimit = true,
}
local POLICIES = { reject = true, dropOldest = true }

-- Integers exactly representable in a double, which is what cjson yields.
local MAX_INT = 2 ^ 53

local function integer(v)
    return type(v) == "number" and v >= 0 and v <= MAX_INT
           and v == math.floor(v)
end

-- Returns the options table or nil and the message of a 400.
function _M.check(options)
    if options == nil then return {} end
    if type(options) ~= "table" or options[1] ~= nil then
        return nil, "options must be an object"
    end
    for k, v in pairs(options) do
        if not KNOWN[k] then
            return nil, "unknown option " .. tostring(k) .. " (options: "
                        .. table.concat(_M.KEYS, ", ") .. ")"
        end
        if INTEGERS[k] and not integer(v) then
            return nil, k .. " must be a non-negative integer"
        end
        if k == "policy" and not POLICIES[v] then
            return nil, "policy must be reject or dropOldest"
        end
        if k == "windowBuffer" then
            if type(v) ~= "table" then
                return nil, "windowBuffer must be {ms, count}"
            end
            for wk, wv in pairs(v) do
                if wk ~= "ms" and wk ~= "count" then
                    return nil, "windowBuffer is {ms, count} and nothing else"
                end
                if not integer(wv) then
                    return nil, "windowBuffer." .. wk
                                .. " must be a non-negative integer"
                end
            end
            if v.ms == nil or v.count == nil then
                return nil, "windowBuffer needs both ms and count"
            end
        end
    end
    return options
end

return _M
