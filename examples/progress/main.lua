-- Progress events of a long job: only the latest few matter and none
-- matters for long. The queue is declared with maxLength 5 and
-- dropOldest (a fast producer evicts old events instead of being refused)
-- and ttlSeconds 2 (a watcher that comes late sees nothing stale).
-- Declarations live in PostgreSQL, so this example needs a database.
local client = require("ephd.client")
local socket = require("socket")

local url = os.getenv("EPHD_URL")
local QUEUE = "job-42-progress"
local c = client.new({ url = url })

local stored = assert(c:configure(QUEUE, {
    maxLength = 5, policy = "dropOldest", ttlSeconds = 2,
}))
print(("progress: declared %s, maxLength %d, %s, ttl %d s"):format(
    QUEUE, stored.options.maxLength, stored.options.policy,
    stored.options.ttlSeconds))

for pct = 5, 100, 5 do
    assert(c:push(QUEUE, { { job = 42, percent = pct } }) == 1)
end

local function entry()
    for _, q in ipairs(assert(c:queues()).queues) do
        if q.queue == QUEUE then return q end
    end
end

local latest = assert(c:pop(QUEUE, { batch = 10, commitOnDelivery = true }))
local seen = {}
for _, m in ipairs(latest) do seen[#seen + 1] = m.payload.percent end
print("progress: a watcher arriving now sees " .. table.concat(seen, ", "))
assert(#latest == 5 and seen[5] == 100)
local q = entry()
print(("progress: %d older events dropped for the bound"):format(
    q.drops.bounds))
assert(q.drops.bounds == 15)

assert(c:push(QUEUE, { { job = 42, percent = 100, done = true } }) == 1)
-- The broker drops what is past its ttl on its housekeeping tick (each
-- second): wait for that, rather than for a guess at it.
local deadline = socket.gettime() + 10
repeat
    socket.sleep(0.1)
    q = entry()
until q.drops.ttl > 0 or socket.gettime() > deadline
local late = assert(c:pop(QUEUE, { commitOnDelivery = true }))
print(("progress: past the ttl a watcher sees %d events; %d expired by ttl")
      :format(#late, q.drops.ttl))
assert(#late == 0 and q.drops.ttl == 1)
assert(c:delete(QUEUE))
