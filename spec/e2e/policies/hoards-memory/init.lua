-- A candidate whose limits hook keeps everything it can allocate: as a
-- shadow it fills the policy memory cap's share a candidate has, then
-- disables itself; the live policy must still have room for its own
-- (spec/e2e/shadow_spec.lua).
local kept = {}

return {
    name = "hoards-memory",
    version = 1,
    hooks = {
        limits = function(tenant, grant, defaults)
            while true do
                kept[#kept + 1] = ("y"):rep(4096) .. #kept
            end
        end,
    },
}
