-- Logging from Lua in the broker's one shape: C writes ts, level and event;
-- this formats the fields as logfmt, keys sorted, values quoted when they
-- need it. Events only: nothing here is meant for a per-message path.
local core = require("ephd.core")

local C = core.C

local _M = {}

local function quote(v)
    v = tostring(v)
    if v ~= "" and not v:find('[%s="\\%c]') then return v end
    return '"' .. v:gsub('[\\"]', "\\%0"):gsub("\n", "\\n"):gsub("%c", " ")
           .. '"'
end

function _M.fields(t)
    local keys = {}
    for k, v in pairs(t or {}) do
        local kind = type(v)
        if type(k) == "string" and k:find("^[%w_]+$")
                and (kind == "string" or kind == "number"
                     or kind == "boolean") then
            keys[#keys + 1] = k
        end
    end
    table.sort(keys)
    for i, k in ipairs(keys) do keys[i] = k .. "=" .. quote(t[k]) end
    return table.concat(keys, " ")
end

for _, level in ipairs({ "info", "warn", "error" }) do
    _M[level] = function(event, t)
        C.ephd_ffi_log_fields(level, event, _M.fields(t))
    end
end

return _M
