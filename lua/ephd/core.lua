-- The one module that calls ffi.cdef: declares core/ffi.h (as generated into
-- ephd.abi), checks the ABI handshake and that every declared function is
-- exported by the running binary, and allocates the shared scratch objects.
local ffi = require("ffi")
local abi = require("ephd.abi")

-- The ABI these Lua modules were written against; the binary reports its
-- own, so a Lua tree newer or older than the daemon refuses to load.
local ABI_VERSION = 31

local _M = {}

-- Every function the header declares (comments may name them too).
function _M.declared_functions(text)
    local names = {}
    for name in text:gsub("/%*.-%*/", ""):gmatch("(ephd_[%w_]+)%s*%(") do
        names[#names + 1] = name
    end
    return names
end

ffi.cdef(abi)
local C = ffi.C

for _, name in ipairs(_M.declared_functions(abi)) do
    local ok = pcall(function() return C[name] end)
    if not ok then
        error("ephd.core: " .. name .. " is declared in ffi.h but not "
              .. "exported by this binary", 0)
    end
end

local version = C.ephd_ffi_abi_version()
if version ~= ABI_VERSION then
    error(("ephd.core: the binary speaks FFI ABI %d, these modules %d")
          :format(version, ABI_VERSION), 0)
end

_M.C = C
_M.ABI_VERSION = ABI_VERSION
_M.request_t = ffi.typeof("const ephd_request_t *")
_M.request_slot = C.ephd_ffi_request_slot()
_M.config = C.ephd_ffi_config()

return _M
