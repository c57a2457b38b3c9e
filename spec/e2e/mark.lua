-- The forward mark as a member writes it (core/cell/mark.h), for specs that
-- forge one: HMAC-SHA256 through libcrypto, keyed by the cell token.
local ffi = require("ffi")

ffi.cdef [[
const void *EVP_sha256(void);
unsigned char *HMAC(const void *md, const void *key, int key_len,
                    const unsigned char *d, size_t n, unsigned char *md,
                    unsigned int *md_len);
]]
local crypto = ffi.load("crypto")
local socket = require("socket")

local M = {}

-- The X-Queen-Forward value for method and target (path and query as
-- sent) with a body of body_len bytes, signed at ms (default: now).
function M.sign(token, tenant, method, target, body_len, ms)
    ms = ms or math.floor(socket.gettime() * 1000)
    local stamp = ("%015d"):format(ms)
    local msg = "ephd-forward-1\n" .. stamp .. "\n" .. tenant .. "\n" .. method
                .. "\n" .. target .. "\n" .. tostring(body_len or 0)
    local out, n = ffi.new("unsigned char[32]"), ffi.new("unsigned int[1]")
    crypto.HMAC(crypto.EVP_sha256(), token, #token, msg, #msg, out, n)
    local hex = {}
    for i = 0, 31 do hex[#hex + 1] = ("%02x"):format(out[i]) end
    return tenant .. " " .. stamp .. " " .. table.concat(hex)
end

return M
