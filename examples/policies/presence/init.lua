-- Queues by name: a presence-* queue (who is in a room, typing, online)
-- holds the last few events for half a minute, with no configure call
-- from anyone. Other queues keep the broker's defaults; a queue declared
-- with configure keeps its declaration whatever its name.
return {
    name = "presence",
    version = 1,
    hooks = {
        -- queue_options(tenant, queue) -> nothing for the broker's
        -- defaults, or the options configure takes (maxBytes, maxLength,
        -- policy, ttlSeconds, leaseSeconds, retryLimit, windowBuffer).
        -- Asked once, when a push or pop creates an implicit queue.
        queue_options = function(_, queue)
            if queue:find("^presence%-") then
                return { maxLength = 3, ttlSeconds = 30 }
            end
        end,
    },
}
