-- Applies a load of stored declarations: each row's options are checked and
-- clamped exactly as a configure's are. A row that no longer checks (edited
-- by hand, or written by a newer broker) is skipped and reported, so the
-- queue falls back to implicit rather than running on a guess.
local ffi = require("ffi")
local cjson = require("cjson.safe")
local core = require("ephd.core")
local log = require("ephd.log")
local options = require("ephd.options")

local C = core.C
local config = core.config
local ffi_string = ffi.string

local _M = {}

local row = ffi.new("ephd_decl_row_t")
local in_force = ffi.new("ephd_options_t")

-- Returns how many rows were applied and a list of complaints.
function _M.apply()
    local applied, bad = 0, {}
    for i = 0, C.ephd_ffi_store_rows() - 1 do
        C.ephd_ffi_store_row(i, row)
        local tenant = ffi_string(row.tenant.ptr, row.tenant.len)
        local queue = ffi_string(row.queue.ptr, row.queue.len)
        local text = ffi_string(row.options.ptr, row.options.len)
        local opts, err = cjson.decode(text)
        if opts ~= nil then opts, err = options.check(opts, text) end
        if opts then
            options.in_force(opts, config, in_force)
            C.ephd_ffi_declare(tenant, #tenant, queue, #queue, in_force)
            applied = applied + 1
        else
            bad[#bad + 1] = queue .. ": " .. tostring(err)
        end
    end
    if #bad > 0 then
        log.warn("declarations_skipped", { count = #bad,
                                           rows = table.concat(bad, "; ") })
    end
    return applied, bad
end

return _M
