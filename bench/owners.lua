-- bench/owners.lua URL QUEUE: which partitions of QUEUE the broker at URL
-- owns in its cell. Pushes one message to each of 64 partitions through
-- it (the cell relays each to its owner), reads which it holds, then
-- resets the queue (every broker's copy). Prints two lines: the partitions
-- it owns, then the others, each comma-separated.
local client = require("ephd.client")

local url, queue = arg[1], arg[2]
local c = client.new({ url = url })
local all = {}
for i = 1, 64 do
    all[i] = "p-" .. i
    assert(c:push(queue, { 1 }, { partition = all[i] }))
end
local depth = assert(c:depth(queue))
local mine = {}
for _, p in ipairs(depth.partitions) do mine[p.partition] = true end
local here, there = {}, {}
for _, p in ipairs(all) do
    local list = mine[p] and here or there
    list[#list + 1] = p
end
assert(c:reset(queue))
print(table.concat(here, ","))
print(table.concat(there, ","))
