-- The default policy: a self-hosted broker that lets every request through.
-- Copy this directory and point --policy-dir at the copy to change it.
return {
    name = "default",
    version = 1,
    hooks = {
        -- authenticate(request) -> nothing to let it through, or a code of
        -- the refusal taxonomy and a reason to refuse it.
        -- request: { route, tenant, authorization }.
        authenticate = function(request)
            return nil
        end,
    },
}
