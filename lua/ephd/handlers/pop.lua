-- GET /api/v1/ephemeral/pop: the query is checked here; C takes the batch
-- and answers, or parks the request on the group's gate.
local ffi = require("ffi")
local core = require("ephd.core")
local implicit = require("ephd.implicit")
local validate = require("ephd.validate")

local C = core.C
local cfg = core.config
local ffi_string = ffi.string

local KNOWN = {
    queue = true, partition = true, group = true, batch = true, wait = true,
    timeout = true, commitOnDelivery = true,
    autoAck = true, -- commitOnDelivery's name before Queen 2.0.2, still read
    notify = true, -- a member's whole-queue pop (core/cell/whole_pop.h)
}

local _M = {}

-- Served by its partition's owner; naming none, over the whole cell
-- (core/cell/whole_pop.h).
_M.routed = C.EPHD_CELL_POP

function _M.parse(ctx)
    local req = ctx.req
    local q, err = validate.query(ffi_string(req.query.ptr, req.query.len),
                                  KNOWN)
    if not q then return err end
    local queue, partition, group, batch, wait, timeout, auto_ack
    queue, err = validate.name(q.queue, "queue")
    -- An empty partition or group is absent, as in Queen: the whole queue,
    -- queue mode (a push's partition "" stays a 400, as there).
    if queue and q.partition and q.partition ~= "" then
        partition, err = validate.name(q.partition, "partition")
    end
    if not err and q.group and q.group ~= "" then
        group, err = validate.name(q.group, "group")
    end
    if not err then
        batch, err = validate.integer(q.batch, "batch", 1)
    end
    if not err then
        wait, err = validate.boolean(q.wait, "wait", false)
    end
    if not err then
        timeout, err = validate.integer(q.timeout, "timeout",
                                        tonumber(cfg.pop_timeout_ms))
    end
    if not err then
        auto_ack, err = validate.boolean(q.commitOnDelivery,
                                        "commitOnDelivery", false)
    end
    if not err then
        -- Either name true commits on delivery, as in Queen.
        local alias
        alias, err = validate.boolean(q.autoAck, "autoAck", false)
        auto_ack = auto_ack or alias
    end
    local notify = false
    if not err and req.forward.len > 0 then
        notify, err = validate.boolean(q.notify, "notify", false)
    end
    if err then return err end
    -- The strings stay referenced from ctx while C reads them (and are
    -- what admit sees).
    ctx.queue, ctx.partition, ctx.group = queue, partition or false,
                                          group or false
    local args = ctx.req.op.pop
    args.queue, args.queue_len = queue, #queue
    args.partition, args.partition_len = partition, partition and #partition
                                                    or 0
    args.group, args.group_len = group, group and #group or 0
    args.batch = validate.clamp(batch, 1, cfg.max_batch)
    args.timeout_ms = validate.clamp(timeout, 0,
                                     tonumber(cfg.max_pop_timeout_ms))
    args.timeout_given = q.timeout and 1 or 0
    args.wait = wait and 1 or 0
    args.auto_ack = auto_ack and 1 or 0
    args.notify = notify and 1 or 0
end

function _M.commit(ctx)
    local tenant, op = ctx.tenant, ctx.req.op
    local args = op.pop
    args.tenant, args.tenant_len = tenant, #tenant
    args.limits = ctx.limits.c
    local rc = C.ephd_ffi_pop(ctx.req)
    if rc == C.EPHD_E_NEW_QUEUE then
        implicit.fill(ctx.req, tenant, ctx.queue)
        rc = C.ephd_ffi_pop(ctx.req)
    end
    if rc == C.EPHD_E_REFUSED then return op.refusals end
    return 0
end

return _M
