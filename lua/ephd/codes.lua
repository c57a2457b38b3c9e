-- The one list of what an answer can say: every error code with its HTTP
-- status, and every status with its reason phrase. Plain data, read by
-- ephd.errors (the broker's Lua), ephd.client and the specs, and turned by
-- the build (cmake/codes.cmake) into the C header ephd_codes.h, so C names
-- a code by enum (core/errors.h) and cannot spell one the list lacks.
-- cmake reads it line by line: keep each row on one line, in this form.
return {
    -- Every error body is {"error": "<for humans>", "code": "<one of
    -- these>"}, and the status follows from the code (the HTTP layer's
    -- own refusals keep the code ephemeral_bad_request with a status of
    -- theirs: 405, 408, 413, 431).
    CODES = {
        -- The family's closed taxonomy: the contract's codes.
        { code = "ephemeral_bad_request", status = 400, layer = "family" },
        { code = "ephemeral_quota_exceeded", status = 403, layer = "family" },
        { code = "feature_gated", status = 403, layer = "family" },
        { code = "ephemeral_queue_not_found", status = 404, layer = "family" },
        { code = "queue_full", status = 429, layer = "family" },
        { code = "rate_limited", status = 429, layer = "family" },
        { code = "ephemeral_configure_failed", status = 500, layer = "family" },
        { code = "ephemeral_delete_failed", status = 500, layer = "family" },
        { code = "ephemeral_unavailable", status = 503, layer = "family" },
        { code = "owner_moved", status = 503, layer = "family" },
        { code = "ephemeral_forward_failed", status = 503, layer = "family" },
        { code = "ephemeral_disabled", status = 503, layer = "family" },
        -- Identity refusals come from the API's access layer in front of
        -- the family (as a gateway's do), so they carry the API's codes: a
        -- missing or unknown credential, a level too weak.
        { code = "unauthorized", status = 401, layer = "access" },
        { code = "forbidden", status = 403, layer = "access" },
        -- The HTTP layer's answer for a path that is no route: outside the
        -- family's taxonomy too, since a client must not read it as the
        -- depth read's ephemeral_queue_not_found, nor as a malformed
        -- request.
        { code = "route_not_found", status = 404, layer = "routing" },
    },
    -- Every status the broker answers with; /metrics counts each by route
    -- (any other as "other").
    STATUSES = {
        { status = 200, reason = "OK" },
        { status = 201, reason = "Created" },
        { status = 400, reason = "Bad Request" },
        { status = 401, reason = "Unauthorized" },
        { status = 403, reason = "Forbidden" },
        { status = 404, reason = "Not Found" },
        { status = 405, reason = "Method Not Allowed" },
        { status = 408, reason = "Request Timeout" },
        { status = 413, reason = "Payload Too Large" },
        { status = 429, reason = "Too Many Requests" },
        { status = 431, reason = "Request Header Fields Too Large" },
        { status = 500, reason = "Internal Server Error" },
        { status = 503, reason = "Service Unavailable" },
    },
}
