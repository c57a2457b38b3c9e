-- Reads counters at its top level: `ephd policy check` has no engine.
local c = ephd.counters("00000000-0000-0000-0000-000000000001")
return {
    name = "counters",
    version = #tostring(c),
    hooks = {},
}
