-- Small control bodies (reset, configure), decoded with lua-cjson; never
-- used for payloads, whose bytes must survive untouched. lua-cjson decodes
-- [] and {} alike, so the JSON type of a member is asked of C.
local ffi = require("ffi")
local cjson = require("cjson.safe")
local core = require("ephd.core")

local C = core.C
local decode = cjson.decode

local _M = {}

local value = ffi.new("ephd_slice_t")

-- The raw JSON text of a member of the JSON object text `json`, or nil
-- when it is absent.
function _M.raw(json, name)
    if C.ephd_ffi_json_field(json, #json, name, value) ~= C.EPHD_OK then
        return nil
    end
    return ffi.string(value.ptr, value.len)
end

-- The first byte of a top-level member's raw JSON ("{", "[", '"', ...), or
-- nil when it is absent.
function _M.kind(req, name)
    if C.ephd_ffi_json_field(req.body.ptr, req.body.len, name, value)
            ~= C.EPHD_OK then
        return nil
    end
    return ffi.string(value.ptr, 1)
end

-- Whether the JSON object text `json` repeats a key: lua-cjson keeps the
-- last, so `decoded` (its table) has fewer keys than the text members.
-- Text that is no object is another check's to refuse.
function _M.repeats(json, decoded)
    local n = 0
    for _ in pairs(decoded) do n = n + 1 end
    local members = C.ephd_ffi_json_members(json, #json)
    return members >= 0 and members ~= n
end

-- Returns the decoded object, or nil and why it is not one; keys outside
-- `allowed` are refused and named, and so is a key given twice (which
-- one counts would be a guess, and lua-cjson drops the others silently).
function _M.object(req, allowed)
    -- The walk checks every string as strict UTF-8, which lua-cjson does
    -- not: a body it refuses may be refused for its encoding.
    local members = C.ephd_ffi_json_members(req.body.ptr, req.body.len)
    if members < 0 then
        if C.ephd_ffi_utf8_valid(req.body.ptr, req.body.len) ~= C.EPHD_OK then
            return nil, "the body is not UTF-8: every string must be "
                        .. "strict UTF-8 (RFC 3629)"
        end
        return nil, "the body must be a JSON object"
    end
    local obj = decode(ffi.string(req.body.ptr, req.body.len))
    if type(obj) ~= "table" then
        return nil, "the body must be a JSON object"
    end
    local keys = 0
    for k in pairs(obj) do
        keys = keys + 1
        if not allowed[k] then
            local names = {}
            for name in pairs(allowed) do names[#names + 1] = name end
            table.sort(names)
            return nil, "unknown field " .. tostring(k) .. " (fields: "
                        .. table.concat(names, ", ") .. ")"
        end
    end
    if keys ~= members then return nil, "a field appears more than once" end
    return obj
end

return _M
