-- A member's credentials as a broker writes them (core/cell/mark.h), for
-- specs that forge them: the session that opens a connection, signed with
-- HMAC-SHA256 through libcrypto keyed by the cell token, and the mark.
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

local function hmac_hex(token, msg)
    local out, n = ffi.new("unsigned char[32]"), ffi.new("unsigned int[1]")
    crypto.HMAC(crypto.EVP_sha256(), token, #token, msg, #msg, out, n)
    local hex = {}
    for i = 0, 31 do hex[#hex + 1] = ("%02x"):format(out[i]) end
    return table.concat(hex)
end

-- Unique within a run, without touching math.random's sequence, which
-- other specs seed.
local issued = 0
local function nonce()
    issued = issued + 1
    return ("%016x%016x"):format(math.floor(socket.gettime() * 1e6), issued)
end

-- The X-Queen-Session value opening a session at the broker at authority
-- (host:port), signed at ms (default: now) with nonce n (default: fresh).
function M.session(token, authority, ms, n)
    local stamp = ("%015d"):format(ms or math.floor(socket.gettime() * 1000))
    n = n or nonce()
    return stamp .. " " .. n .. " "
           .. hmac_hex(token, "ephd-session-1\n" .. stamp .. "\n" .. n .. "\n"
                              .. authority)
end

-- A marked request's headers on a fresh connection to d (a daemon):
-- Host as a member dials it, the session, and the mark for tenant. opts
-- may give session (a value to send as it is) and extra headers.
function M.headers(token, d, tenant, opts)
    opts = opts or {}
    local authority = "127.0.0.1:" .. d.port
    local h = { Host = authority, ["X-Queen-Forward"] = tenant,
                ["X-Queen-Session"] = opts.session
                                      or M.session(token, authority) }
    for k, v in pairs(opts.extra or {}) do h[k] = v end
    return h
end

return M
