-- A tenant's queues, written by C from memory alone: the family's listing
-- (the caller's own) and the operator's (any tenant's, paused or not).
local ffi = require("ffi")
local core = require("ephd.core")
local tenancy = require("ephd.tenancy")
local validate = require("ephd.validate")

local C = core.C

local _M = {}

-- GET /api/v1/ephemeral/queues. It takes no parameters, and ignores any,
-- as Queen does (validate.query).
_M.family = {
    parse = function() end,
    commit = function(ctx)
        C.ephd_ffi_queues(ctx.req, ctx.tenant, #ctx.tenant)
        return 0
    end,
}

-- GET /api/v1/system/queues[?tenant=UUID]: a tenant's queues (the
-- caller's without ?tenant=), as the family's listing answers them. That
-- one refuses while the surface is paused, as every route of the family
-- does (the contract: a paused surface says nothing about any tenant);
-- this one is the operator's, who paused it and must still see what is
-- held (ephd status, the dashboard).
local ONE_TENANT = { tenant = true }

_M.system = {
    parse = function(ctx)
        local q, err = validate.query(ffi.string(ctx.req.query.ptr,
                                                 ctx.req.query.len), ONE_TENANT,
                                      true)
        if not q then return err end
        if q.tenant and not tenancy.valid(q.tenant) then
            return "tenant must be a UUID"
        end
        ctx.args = q.tenant and q.tenant:lower() or ctx.tenant
    end,
    commit = function(ctx)
        C.ephd_ffi_queues(ctx.req, ctx.args, #ctx.args)
        return 0
    end,
}

return _M
