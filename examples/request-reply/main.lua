-- Request/reply over per-client implicit inboxes. Each client pushes its
-- request, naming its own inbox, to the shared `requests` queue, then
-- waits on the inbox with a long poll; the service (service.lua, running
-- beside it) answers into that inbox. Inboxes are never declared: the
-- first push creates one, and the broker collects it once it has been
-- empty and unpolled for QUEEN_EPHEMERAL_IMPLICIT_IDLE_S.
local client = require("ephd.client")
local socket = require("socket")

local CLIENTS = tonumber(os.getenv("CLIENTS") or 20)
local url = os.getenv("EPHD_URL")

local rtts = {}
math.randomseed(os.time())
for i = 1, CLIENTS do
    local c = client.new({ url = url })
    local inbox = ("inbox-%d-%06d"):format(i, math.random(0, 999999))
    local t0 = socket.gettime()
    assert(c:push("requests", { { inbox = inbox, id = i, n = i } }))
    local replies, err = c:pop(inbox, { wait = true, timeout = 5000,
                                        commitOnDelivery = true })
    assert(replies, tostring(err))
    assert(#replies == 1, "no reply within 5 s in " .. inbox)
    local r = replies[1].payload
    assert(r.id == i and r.answer == i * i, "someone else's reply")
    rtts[#rtts + 1] = (socket.gettime() - t0) * 1000
    c:close()
end

table.sort(rtts)
print(("request-reply: %d round trips, each reply in its own inbox; "
       .. "p50 %.1f ms, max %.1f ms"):format(#rtts, rtts[math.ceil(#rtts / 2)],
                                             rtts[#rtts]))
