-- Small control bodies (reset, configure), decoded with lua-cjson; never
-- used for payloads, whose bytes must survive untouched.
local ffi = require("ffi")
local cjson = require("cjson.safe")

local decode = cjson.decode

local _M = {}

-- Returns the decoded object, or nil and why it is not one; keys outside
-- `allowed` are refused and named.
function _M.object(req, allowed)
    local text = ffi.string(req.body.ptr, req.body.len)
    local obj = decode(text)
    if type(obj) ~= "table" or (next(obj) == nil and not text:find("{"))
            or obj[1] ~= nil then
        return nil, "the body must be a JSON object"
    end
    for k in pairs(obj) do
        if not allowed[k] then
            local names = {}
            for name in pairs(allowed) do names[#names + 1] = name end
            table.sort(names)
            return nil, "unknown field " .. tostring(k) .. " (fields: "
                        .. table.concat(names, ", ") .. ")"
        end
    end
    return obj
end

return _M
