-- What C calls (core/lua_host.c), by name: the one table the host looks its
-- entry points up in, each the function of the module whose job it is.
local dispatch = require("ephd.dispatch")
local lifecycle = require("ephd.lifecycle")
local metering = require("ephd.metering")
local rate = require("ephd.rate")
local store = require("ephd.store")

return {
    -- Per request: C keeps these two, not their names.
    dispatch = dispatch.dispatch,
    observe = dispatch.observe,
    -- The policy's lifecycle: each takes (dir, files, default_dir,
    -- default_files) and returns true, name, version or nil, why.
    init = lifecycle.init,
    reload = lifecycle.reload,
    check = lifecycle.check,
    shadow = lifecycle.shadow,
    -- The store's loads, applied.
    apply_declarations = store.apply_declarations,
    apply_grants = store.apply_grants,
    -- The metering timer.
    meter = metering.tick,
    -- A push relayed to its owner and refused there gives back what the
    -- rate took at this edge (core/cell/relay_edge.c), as a refusal here
    -- does.
    refund = rate.refund,
}
