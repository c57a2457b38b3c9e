-- A rate limit that is stricter for large payloads: a push costs one token
-- per message plus one per started CHUNK bytes of payload, so a tenant
-- pushing big messages reaches its rate sooner than one pushing small ones.
local CHUNK = 16384

return {
    name = "large-payload-rate",
    version = 1,
    hooks = {
        cost = function(push)
            return push.messages + math.ceil(push.bytes / CHUNK)
        end,
    },
}
