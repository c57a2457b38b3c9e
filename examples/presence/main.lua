-- Presence and typing indicators, fanned out with one consumer group per
-- subscriber: every group has its own cursor, so each subscriber sees
-- every event, in order, and a slow one holds back nobody else. Events are
-- popped with commitOnDelivery: a typing indicator that is missed is not
-- retried.
local client = require("ephd.client")

local url = os.getenv("EPHD_URL")
local ROOM = "room-7-typing"
local subscribers = { "alice-ui", "bob-ui", "carol-ui" }

local c = client.new({ url = url })
-- A group starts at the ring's head when it first polls: subscribers poll
-- once to join, then see everything pushed after.
for _, group in ipairs(subscribers) do
    assert(c:pop(ROOM, { group = group, commitOnDelivery = true }))
end

local events = {
    { user = "alice", typing = true }, { user = "bob", typing = true },
    { user = "alice", typing = false }, { user = "carol", online = true },
    { user = "bob", typing = false },
}
assert(c:push(ROOM, events) == #events)

for _, group in ipairs(subscribers) do
    local got = assert(c:pop(ROOM, { group = group, batch = 100,
                                     commitOnDelivery = true }))
    assert(#got == #events, group .. " saw " .. #got .. " events")
    for i, m in ipairs(got) do
        assert(m.payload.user == events[i].user, group .. ": out of order")
    end
    print(("presence: %s saw all %d events in order"):format(group, #got))
end

-- Every group has consumed everything, so nothing is held any more.
local depth = assert(c:depth(ROOM))
print(("presence: %d groups, %d pending after the fan-out")
      :format(#depth.groups, depth.pending))
assert(depth.pending == 0)
