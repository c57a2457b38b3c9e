-- Placement in Lua: which member of a cell owns (tenant, queue, partition),
-- decided exactly as core/cell/placement.c decides it (the hash is defined
-- byte by byte in core/cell/placement.h, and docs/cell.md, "Placement"),
-- for a client that routes each request to its owner (ephd.client's
-- `route`). Rendezvous hashing: every member scores the key, the highest
-- score wins, equal scores go to the smaller id. Needs LuaJIT: the hash is
-- 64-bit arithmetic, done on the ffi's uint64_t (which wraps, as C's does).
local bit = require("bit")
local ffi = require("ffi")

local bor, bxor = bit.bor, bit.bxor
local lshift, rshift = bit.lshift, bit.rshift
local byte, tonumber = string.byte, tonumber

local U64 = ffi.typeof("uint64_t")

local _M = {}

-- The name GET /api/v1/ephemeral/cell gives this hash: a client meeting
-- another name must not compute owners with this one.
_M.HASH = "ephd-rendezvous-fmix64-1"

-- MurmurHash3's 64-bit finalizer (fmix64).
local function mix(x)
    x = bxor(x, rshift(x, 33)) * 0xff51afd7ed558ccdULL
    x = bxor(x, rshift(x, 33)) * 0xc4ceb9fe1a85ec53ULL
    return bxor(x, rshift(x, 33))
end

-- h = mix(h ^ length), then h = mix(h ^ word) for each 8 bytes of s read
-- little-endian, the last group zero-padded.
local function absorb(h, s)
    local n = #s
    h = mix(bxor(h, U64(n)))
    for i = 1, n, 8 do
        local w = U64(0)
        for j = 0, 7 do
            local b = byte(s, i + j)
            if not b then break end
            w = bor(w, lshift(U64(b), 8 * j))
        end
        h = mix(bxor(h, w))
    end
    return h
end

function _M.key(tenant, queue, partition)
    local h = absorb(0x9e3779b97f4a7c15ULL, tenant)
    h = absorb(h, queue)
    return absorb(h, partition)
end

function _M.score(id, key)
    return mix(bxor(key, mix(id)))
end

-- A member id as the cell shows it (16 hex digits) as a uint64_t; nil for
-- anything else.
function _M.id(hex)
    if type(hex) ~= "string" or not hex:find("^%x+$") or #hex ~= 16 then
        return nil
    end
    local hi, lo = tonumber(hex:sub(1, 8), 16), tonumber(hex:sub(9), 16)
    return bor(lshift(U64(hi), 32), U64(lo))
end

-- The owner of (tenant, queue, partition) among members, a list of
-- {id = uint64_t, ...} (as ephd.client keeps the view's members): the
-- member itself. A cell of one is never hashed.
function _M.owner(members, tenant, queue, partition)
    local best = members[1]
    if #members < 2 then return best end
    local key = _M.key(tenant, queue, partition)
    local top = _M.score(best.id, key)
    for i = 2, #members do
        local m = members[i]
        local s = _M.score(m.id, key)
        if s > top or (s == top and m.id < best.id) then
            best, top = m, s
        end
    end
    return best
end

-- For tests: a uint64_t as 16 hex digits.
function _M.hex(v)
    return bit.tohex(v, 16)
end

return _M
