-- The cell's routes: between its members (core/cell/members.c, open), the
-- readiness a member asks before it places partitions on a newcomer and
-- the notice a stopping member sends before it hands its partitions over;
-- and the operator's view of it (admin, system).
local cjson = require("cjson.safe")
local bit = require("bit")
local ffi = require("ffi")
local core = require("ephd.core")
local placement = require("ephd.placement")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C
local ffi_string = ffi.string

local out = ffi.new("char[128]")

local _M = {}

function _M.ready(req)
    local status = C.ephd_ffi_cell_ready(out, 128)
    reply.json(req, status, ffi_string(out))
end

function _M.leaving(req)
    local rc = C.ephd_ffi_cell_leaving(req, out, 128)
    if rc == C.EPHD_E_REFUSED then
        return reply.refuse(req, "unauthorized",
                            "the leaving notice is only for the cell's "
                            .. "members", 401)
    elseif rc ~= C.EPHD_OK then
        return reply.refuse(req, "ephemeral_bad_request",
                            "a leaving notice is {\"id\",\"epoch\"}", 400)
    end
    reply.json(req, 200, ffi_string(out))
end

-- GET /api/v1/system/cell: this broker's own view of its cell, as its last
-- heartbeat read it (core/cell/members.c, docs/cell.md).
local cell = ffi.new("ephd_cell_t")
local member = ffi.new("ephd_cell_member_t")

local function view_body()
    C.ephd_ffi_cell(cell, 1)
    local members, self = {}, nil
    for i = 0, cell.members - 1 do
        if C.ephd_ffi_cell_member(i, member) == C.EPHD_OK then
            local m = {
                id = ffi_string(member.id, 16),
                address = ffi_string(member.address.ptr, member.address.len),
                epoch = ("%08x"):format(member.epoch),
                live = member.live ~= 0,
                ttlMs = tonumber(member.ttl_ms),
                seenMsAgo = tonumber(member.seen_ms_ago),
            }
            members[#members + 1] = m
            if i == cell.self then
                self = { id = m.id, address = m.address, epoch = m.epoch }
            end
        end
    end
    return cjson.encode({
        self = self,
        members = members,
        version = bit.tohex(cell.version, 16),
        live = cell.live,
        ttlMs = tonumber(cell.ttl_ms),
        fresh = cell.fresh ~= 0,
        database = cell.database ~= 0,
        partitions = { held = tonumber(cell.partitions_held),
                       owned = tonumber(cell.partitions_owned) },
    })
end

_M.view = {
    parse = validate.no_query,
    commit = function(ctx)
        reply.json(ctx.req, 200, view_body())
        return 0
    end,
}

-- GET /api/v1/ephemeral/cell: what a client needs to route each request
-- to its owner itself (docs/cell.md, "Routing to the owner"): the view
-- placement decides over, in its order (by id), with the version that
-- changes with it and the name of the hash. Any identity may read it: the
-- members' ids, addresses and epochs are no secret (every message id
-- carries an epoch, the ready route tells an id). Not the admin view: no
-- rows outside the view, no ages, no walk over the partitions. The hash's
-- name is ephd.placement's, the Lua copy of it a client computes with.
_M.placement = {
    parse = validate.no_query,
    commit = function(ctx)
        C.ephd_ffi_cell(cell, 0) -- no walk over the partitions
        local members, self = {}, nil
        for i = 0, cell.members - 1 do
            if C.ephd_ffi_cell_member(i, member) == C.EPHD_OK
               and member.live ~= 0 then
                local id = ffi_string(member.id, 16)
                members[#members + 1] = {
                    id = id,
                    address = ffi_string(member.address.ptr,
                                         member.address.len),
                    epoch = ("%08x"):format(member.epoch),
                }
                if i == cell.self then self = id end
            end
        end
        reply.json(ctx.req, 200, cjson.encode({
            version = bit.tohex(cell.version, 16),
            self = self,
            -- The caller's tenant as this broker decided it (a policy may
            -- map a token to it): the name placement hashes.
            tenant = ctx.tenant,
            hash = placement.HASH,
            fresh = cell.fresh ~= 0,
            members = members,
        }))
        return 0
    end,
}

return _M
