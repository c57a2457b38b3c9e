-- A cost hook that reads the push's queue: a push to a queue named
-- "bulk..." costs a hundred times its messages, past the default burst
-- for a push of 101. Loaded as a shadow beside the default policy (which
-- has no cost hook), it must see the queue a live cost hook would.
return {
    name = "cost-by-queue",
    version = 1,
    hooks = {
        cost = function(push)
            if push.queue:sub(1, 4) == "bulk" then
                return push.messages * 100
            end
            return push.messages
        end,
    },
}
