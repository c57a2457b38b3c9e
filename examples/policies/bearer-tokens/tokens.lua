-- token -> identity. Levels: read-only, write-only, read-write, admin.
-- Rotate a token by editing this file and reloading (SIGHUP or
-- POST /api/v1/system/policy/reload).
return {
    ["admin-token"] = { tenant = "11111111-1111-1111-1111-111111111111",
                        level = "admin" },
    ["producer-token"] = { tenant = "11111111-1111-1111-1111-111111111111",
                           level = "write-only" },
    ["dashboard-token"] = { tenant = "11111111-1111-1111-1111-111111111111",
                            level = "read-only" },
    ["other-tenant-token"] = {
        tenant = "22222222-2222-2222-2222-222222222222", level = "read-write" },
}
