-- The options of a new implicit queue, from the policy's queue_options
-- hook (docs/policy.md). C asks, with EPHD_E_NEW_QUEUE, only while the
-- policy in force has the hook and only when a push or pop would create
-- a queue: the hook runs once per queue created, never per message, and
-- a policy without it costs nothing. A queue keeps the options it was
-- created with until it is collected or declared (a declaration's stored
-- options win), so a reload's answers hold for queues created after it.
local contract = require("ephd.contract")
local core = require("ephd.core")
local hooks = require("ephd.hooks")
local options = require("ephd.options")

local C = core.C
local config = core.config

local _M = {}

-- The policy p is in force (ephd.ladder.use): whether C asks.
function _M.use(p)
    C.ephd_ffi_queue_options(p.hooks.queue_options and 1 or 0)
end

-- Fills req's operation with the options for tenant's new queue, checked
-- as configure checks a declaration and clamped to the same ceilings;
-- the commit is then made again. A hook that fails (raises, overruns, or
-- answers what configure would refuse) is logged and counted as any
-- hook's, and the queue runs with the broker's defaults: a policy's
-- mistake about a queue's shape should not refuse its traffic.
function _M.fill(req, tenant, queue)
    local ok, o = hooks.call("queue_options", tenant, queue)
    if ok then
        local bad = contract.check.queue_options(o)
        if bad then
            hooks.reject("queue_options", bad)
            o = nil
        end
    end
    local op = req.op
    options.in_force(ok and o or {}, config, op.created)
    op.has_created = 1
end

return _M
