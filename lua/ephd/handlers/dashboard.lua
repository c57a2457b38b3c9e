-- GET /dashboard: the live dashboard, one static page (dashboard.html beside
-- these modules) read once when the broker loads. It holds no data: the
-- page fetches the status reads and system routes with the viewer's own
-- identity, so it is answered before the ladder, like the probes.
local core = require("ephd.core")

local C = core.C

local function read_page()
    local source = debug.getinfo(1, "S").source:sub(2)
    local dir = source:match("^(.*)/handlers/[^/]*$") or "."
    local f = assert(io.open(dir .. "/dashboard.html", "rb"))
    local page = f:read("*a")
    f:close()
    return page
end

local PAGE = read_page()

return function(req)
    C.ephd_ffi_respond_as(req, 200, "text/html; charset=utf-8", PAGE, #PAGE)
end
