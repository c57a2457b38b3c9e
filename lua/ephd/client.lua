-- A Lua client of the ephemeral routes, over one keep-alive HTTP/1.1
-- connection (luasocket). Every call returns its result and nothing else,
-- or nil and an error whose `code` is the contract's: branch on err.code,
-- never on err.message. A JSON null the broker sends is nil in a result;
-- only payloads keep theirs (client.null), since a nil would cut a list.
--
--   local client = require("ephd.client")
--   local c = client.new({ url = "http://127.0.0.1:6632" })
--   c:push("jobs", { { n = 1 }, "two" })
--   local msgs = c:pop("jobs", { wait = true, timeout = 5000 })
--   c:ack("jobs", { msgs[1].id })
local socket = require("socket")
local cjson = require("cjson.safe")
local codes = require("ephd.codes")

local concat, format = table.concat, string.format

local _M = { _VERSION = "0.1.0" }

local Client = {}
Client.__index = Client

-- Errors ------------------------------------------------------------------

local Error = {}
Error.__index = Error
Error.__tostring = function(e)
    return format("%s (%s): %s", e.code, tostring(e.status or "-"),
                  e.message)
end

-- Codes the broker answers with (ephd.codes, the broker's own list), plus
-- what only a client can see. A broker's route_not_found is read as
-- ephemeral_unsupported, below.
_M.CODES = {
    -- A 404 from anything but the depth read: the broker (or a proxy in
    -- front of it) predates the routes. The contract's name for it.
    ephemeral_unsupported = true,
    -- The broker could not be reached or answered something that is not
    -- this wire; never sent by a broker.
    connection_failed = true, bad_response = true,
}

-- Retrying is worth it for these: 429 means later will work, and the
-- cell's 503s mean come back.
local RETRYABLE = { connection_failed = true }

for _, c in ipairs(codes.CODES) do
    if c.layer ~= "routing" then _M.CODES[c.code] = true end
    if c.status == 429 or c.status == 503 then RETRYABLE[c.code] = true end
end

-- The wait a retryable error carries when the broker sent no Retry-After:
-- queue_full never has one (backpressure: a draining consumer frees room
-- at its own pace), nor do connection failures. 1 s is the least
-- Retry-After can say.
_M.RETRY_AFTER_S = 1

-- retry_after: the broker's Retry-After in seconds; a retryable error
-- without one gets RETRY_AFTER_S, so every retryable error says how long
-- to wait.
local function new_error(code, message, status, retry_after)
    if not retry_after and RETRYABLE[code] then
        retry_after = _M.RETRY_AFTER_S
    end
    return setmetatable({ code = code, message = message, status = status,
                          retry_after = retry_after }, Error)
end

function _M.is_error(v)
    return getmetatable(v) == Error
end

function _M.retryable(err)
    return _M.is_error(err) and RETRYABLE[err.code] == true
end

-- Payloads ----------------------------------------------------------------

-- A JSON null inside a payload, as lua-cjson decodes it.
_M.null = cjson.null

-- A payload given as client.raw(text) is sent as that JSON text, byte for
-- byte; anything else is encoded with cjson.
local Raw = {}
function _M.raw(json_text)
    return setmetatable({ json = json_text }, Raw)
end

local function encode_payload(v)
    if getmetatable(v) == Raw then return v.json end
    local text, err = cjson.encode(v)
    if not text then error("payload is not JSON-encodable: " .. err, 3) end
    return text
end

-- The transport -----------------------------------------------------------

local function parse_url(url)
    local host, port = url:match("^http://([^:/]+):?(%d*)/?$")
    if not host then return nil end
    return host, tonumber(port) or 80
end

function _M.new(opts)
    opts = opts or {}
    local url = opts.url or os.getenv("EPHD_URL") or "http://127.0.0.1:6632"
    local host, port = parse_url(url)
    if not host then error("url must be http://host[:port], got " .. url, 2) end
    return setmetatable({
        host = host, port = port, url = url,
        -- What Host says (RFC 9110 7.2): the port unless it is HTTP's own.
        authority = port == 80 and host or host .. ":" .. port,
        tenant = opts.tenant, token = opts.token,
        timeout = opts.timeout or 10,
        -- Routing each request to its owner (below): off unless asked.
        route = opts.route and true or false,
        view_ttl = opts.view_ttl or _M.VIEW_TTL_S,
        peers = {},
    }, Client)
end

function Client:close()
    if self.sock then self.sock:close() end
    self.sock = nil
    for _, c in pairs(self.peers) do c:close() end
end

-- A kept connection the broker has closed (its idle timeout) reads as
-- ready: it is replaced before anything is sent on it, so a request is
-- never written into a dead socket and retried blind.
function Client:connection()
    local s = self.sock
    if s then
        local ready = socket.select({ s }, nil, 0)
        if ready and ready[1] then
            s:close()
            s = nil
        end
    end
    if not s then
        local err
        s, err = socket.tcp()
        if not s then return nil, err end
        s:settimeout(self.timeout)
        local ok
        ok, err = s:connect(self.host, self.port)
        if not ok then
            s:close()
            return nil, err
        end
        s:setoption("tcp-nodelay", true)
        self.sock = s
    end
    return s
end

-- A chunked body (RFC 9112 7.1), which the broker sends for an answer too
-- long to make at once (a tenant's long queue list): its chunks joined.
local function read_chunked(s)
    local parts = {}
    while true do
        local line, err = s:receive("*l")
        if not line then return nil, err end
        local size = tonumber(line:match("^(%x+)"), 16)
        if not size then return nil, "a bad chunk size: " .. line end
        if size == 0 then
            repeat -- trailers, up to the empty line
                line, err = s:receive("*l")
                if not line then return nil, err end
            until line == ""
            return table.concat(parts)
        end
        local chunk
        chunk, err = s:receive(size + 2)
        if not chunk then return nil, err end
        parts[#parts + 1] = chunk:sub(1, size)
    end
end

-- Status, headers (names lowered) and body of one answer on s; head: the
-- answer to a HEAD, which has no body whatever its headers say.
function _M.read_response(s, head)
    local line, err = s:receive("*l")
    if not line then return nil, err end
    local status = tonumber(line:match("^HTTP/1%.%d (%d%d%d)"))
    if not status then return nil, "not an HTTP response: " .. line end
    local headers = {}
    while true do
        local h
        h, err = s:receive("*l")
        if not h then return nil, err end
        if h == "" then break end
        local k, v = h:match("^([^:]+):%s*(.-)%s*$")
        if k then headers[k:lower()] = v end
    end
    local body = ""
    if head then return status, headers, body end
    -- Coding names are case-insensitive, and chunked is always the last.
    local coding = headers["transfer-encoding"]
    if coding and coding:lower():find("chunked$") then
        body, err = read_chunked(s)
        if not body then return nil, err end
        return status, headers, body
    end
    local len = tonumber(headers["content-length"])
    if not len then
        -- Neither: the body ends at the close (RFC 9112 6.3), as the
        -- broker's long list does to HTTP/1.0 and a proxy may pass on.
        body, err = s:receive("*a")
        if not body then return nil, err end
        headers.connection = "close"
        return status, headers, body
    end
    if len > 0 then
        body, err = s:receive(len)
        if not body then return nil, err end
    end
    return status, headers, body
end

-- The broker's own nulls become nil; payloads are the client's data and
-- keep theirs (a nil inside a list would cut it).
local null = cjson.null

local function drop_nulls(t)
    for k, v in pairs(t) do
        if k ~= "payload" then -- a payload is the client's data, as pushed
            if v == null then
                t[k] = nil
            elseif type(v) == "table" then
                drop_nulls(v)
            end
        end
    end
    return t
end

-- One request and its answer: the decoded body and its text, or nil and
-- an error.
local function exchange(self, method, path, body, wait_s)
    self.hint = nil
    local s, err = self:connection()
    if not s then
        local e = new_error("connection_failed",
                            self.url .. ": " .. tostring(err))
        e.unsent = true -- nothing was written: safe to send elsewhere
        return nil, e
    end
    local head = {
        method, " ", path, " HTTP/1.1\r\nHost: ", self.authority, "\r\n",
    }
    if self.tenant then
        head[#head + 1] = "x-queen-tenant: " .. self.tenant .. "\r\n"
    end
    if self.token then
        head[#head + 1] = "Authorization: Bearer " .. self.token .. "\r\n"
    end
    if body then
        head[#head + 1] = "Content-Type: application/json\r\n"
        head[#head + 1] = "Content-Length: " .. #body .. "\r\n"
    end
    head[#head + 1] = "\r\n"
    head[#head + 1] = body
    s:settimeout(self.timeout + (wait_s or 0))
    local ok
    ok, err = s:send(concat(head))
    local status, headers, text
    if ok then status, headers, text = _M.read_response(s) end
    if not status then
        self:close()
        return nil, new_error("connection_failed",
                              self.url .. ": " .. tostring(err or headers))
    end
    if headers.connection and headers.connection:lower() == "close" then
        self:close()
    end
    -- The owner hint: set only on an answer the broker relayed.
    self.hint = headers["x-queen-owner-address"]
    local decoded = cjson.decode(text)
    if status >= 400 then
        if type(decoded) == "table" and _M.CODES[decoded.code] then
            return nil, new_error(decoded.code, decoded.error, status,
                                  tonumber(headers["retry-after"]))
        end
        if status == 404 then
            return nil, new_error("ephemeral_unsupported",
                                  "no such route on this broker", 404)
        end
        return nil, new_error("bad_response", text, status)
    end
    if type(decoded) ~= "table" then
        return nil, new_error("bad_response", text, status)
    end
    return drop_nulls(decoded), text
end

-- Any route: the decoded answer, or nil and an error.
function Client:request(method, path, body, wait_s)
    local r, err = exchange(self, method, path, body, wait_s)
    if not r then return nil, err end
    return r
end

local function escape(s)
    return (tostring(s):gsub("[^%w%-%._~]", function(c)
        return format("%%%02X", c:byte())
    end))
end

local function query(params, order)
    local out = {}
    for _, k in ipairs(order) do
        local v = params[k]
        if v ~= nil then out[#out + 1] = k .. "=" .. escape(v) end
    end
    return #out > 0 and "?" .. concat(out, "&") or ""
end

-- Routing to owners --------------------------------------------------------
--
-- With `route`, a push, a pop naming its partition and an ack go straight
-- to the member of the cell that owns them (docs/client.md, "Routing to
-- the owner"), over a kept connection per member, rather than through the
-- broker at url, which would relay them. The owner is computed from the
-- cell's placement view (GET /api/v1/ephemeral/cell) with the cell's own
-- hash (ephd.placement); the view is read again when it may be stale: an
-- owner_moved, a relayed answer (its owner hint names another member than
-- the one asked), a member that cannot be reached, or view_ttl passed.
-- Nothing depends on the view being right: a request that reaches a member
-- that no longer owns it is relayed there, as any request is.

-- A view is read again at most this long after it was read, and a view
-- found stale at most once per STALE_GAP_S, so a cell that keeps moving
-- costs a read a second, not one per request.
_M.VIEW_TTL_S = 10
local STALE_GAP_S = 1

local placement -- ephd.placement, loaded with the first view (LuaJIT)

-- The client of one member, by its address (nil for one this client cannot
-- dial): the same identity, one kept connection.
local function member_client(self, address)
    if address == self.url then return self end
    local c = self.peers[address]
    if c == nil and parse_url(address) then
        c = _M.new({ url = address, tenant = self.tenant, token = self.token,
                     timeout = self.timeout })
        self.peers[address] = c
    end
    return c
end

-- Reads the placement view from the broker at url (or, when it cannot be
-- reached, from a member of the last view) and keeps it. Returns the view
-- as the broker answered it, or nil and an error (the last view is kept).
function Client:refresh_view()
    self.view_read_at = socket.gettime()
    self.view_stale = false
    local v, err = self:request("GET", "/api/v1/ephemeral/cell")
    for _, m in ipairs(v == nil and self.members or {}) do
        local c = member_client(self, m.address)
        v = c and c:request("GET", "/api/v1/ephemeral/cell")
        if v then break end
    end
    if not v then
        self.view_stale = true -- tried again within a second
        return nil, err
    end
    if v.version == self.view_version then return v end
    placement = placement or require("ephd.placement")
    local members = {}
    -- A hash this client does not know places nothing: every request goes
    -- to url, which relays it.
    if v.hash == placement.HASH and type(v.members) == "table" then
        for _, m in ipairs(v.members) do
            local id = placement.id(m.id)
            if not id then members = {} break end
            members[#members + 1] = { id = id, address = m.address,
                                      epoch = tostring(m.epoch):lower() }
        end
    end
    -- Connections to members that left the view are closed.
    local kept = {}
    for _, m in ipairs(members) do kept[m.address] = true end
    for address, c in pairs(self.peers) do
        if not kept[address] then
            c:close()
            self.peers[address] = nil
        end
    end
    self.members, self.view_version = members, v.version
    self.view_tenant = v.tenant
    return v
end

-- The members to place over, when routing is on and the cell has several
-- (the view read first, or again, when it is due); nil otherwise.
local function routing_members(self)
    if not self.route then return nil end
    local since = self.view_read_at and socket.gettime() - self.view_read_at
    if not since or since >= self.view_ttl
       or (self.view_stale and since >= STALE_GAP_S) then
        self:refresh_view()
    end
    local members = self.members
    return members and #members > 1 and self.view_tenant and members or nil
end

-- The member a message id's epoch names (its holder), or nil.
local function holder(members, id)
    local epoch = type(id) == "string" and id:match("^e:(%x+):")
    if not epoch then return nil end
    epoch = epoch:lower()
    for _, m in ipairs(members) do
        if m.epoch == epoch then
            return not (m.down_until and m.down_until > socket.gettime())
                   and m or nil
        end
    end
end

-- The member that owns (queue, partition), or whose epoch every ack's id
-- carries; nil when the broker at url should decide (no routing, no view,
-- a pop of the whole queue, an ack over several holders).
local function owner_of(self, queue, partition, acks)
    local members = routing_members(self)
    if not members then return nil end
    if acks then
        local m
        for i, a in ipairs(acks) do
            local h = holder(members, type(a) == "table" and a.id or a)
            if not h or (i > 1 and h ~= m) then return nil end
            m = h
        end
        return m
    end
    if not partition then return nil end
    local m = placement.owner(members, self.view_tenant, queue, partition)
    -- A member this client could not reach is left to url for a while
    -- (its advertised address may be one only the cell can dial).
    if m.down_until and m.down_until > socket.gettime() then return nil end
    return m
end

-- One request to member (nil: the broker at url). A member that could not
-- be reached (nothing was written) leaves it to url, which relays; with
-- routing on, an owner_moved, or an answer relayed elsewhere than to the
-- broker asked, says the view is stale.
local function exchange_at(self, member, method, path, body, wait_s)
    local c = member and member_client(self, member.address) or self
    local r, text = exchange(c, method, path, body, wait_s)
    if not r and text.unsent and c ~= self then
        self.view_stale = true
        member.down_until = socket.gettime() + self.view_ttl
        c = self
        r, text = exchange(c, method, path, body, wait_s)
    end
    -- A hint names the member that served a relayed answer: not the one
    -- asked, so the view (or its absence) sent it astray.
    if self.route and ((c.hint and c.hint ~= c.url)
                       or (not r and text.code == "owner_moved")) then
        self.view_stale = true
    end
    return r, text
end

-- The verbs ---------------------------------------------------------------

-- payloads: a list of Lua values (or client.raw texts). Returns the count
-- pushed.
function Client:push(queue, payloads, opts)
    opts = opts or {}
    local items = {}
    for i, p in ipairs(payloads) do
        items[i] = '{"payload":' .. encode_payload(p) .. "}"
    end
    local body = '{"queue":' .. cjson.encode(queue)
    if opts.partition then
        body = body .. ',"partition":' .. cjson.encode(opts.partition)
    end
    body = body .. ',"messages":[' .. concat(items, ",") .. "]}"
    local r, err = exchange_at(self, owner_of(self, queue,
                                              opts.partition or "Default"),
                               "POST", "/api/v1/ephemeral/push", body)
    if not r then return nil, err end
    return r.pushed
end

local POP_PARAMS = { "queue", "partition", "group", "batch", "wait",
                     "timeout", "commitOnDelivery" }

-- The JSON text of each message's payload in a pop answer, in order: the
-- value of "payload" in each element of "messages". The answer is valid
-- JSON (cjson just decoded it), so skipping a value is counting brackets
-- outside strings.
local function skip_string(text, i) -- i at the opening quote
    while true do
        i = text:find('["\\]', i + 1)
        if text:byte(i) == 34 then return i + 1 end
        i = i + 1 -- a backslash: its escaped character is no quote
    end
end

local function skip_value(text, i)
    local c = text:byte(i)
    if c == 34 then return skip_string(text, i) end
    if c ~= 123 and c ~= 91 then return (text:find("[,}%]%s]", i)) end
    local depth = 0
    repeat
        c = text:byte(i)
        if c == 34 then
            i = skip_string(text, i)
        else
            if c == 123 or c == 91 then
                depth = depth + 1
            elseif c == 125 or c == 93 then
                depth = depth - 1
            end
            i = i + 1
        end
    until depth == 0
    return i
end

local function payload_texts(text)
    local out = {}
    local list = text:find('"messages"%s*:%s*%[')
    -- Each message is one object of the list; its keys are the broker's.
    local i = list and text:find("[{%]]", (text:find("%[", list)))
    while i and text:byte(i) == 123 do
        local stop = skip_value(text, i)
        -- The object's first "payload" key is its own: the fields before
        -- it are the broker's strings and numbers, and a quote in a
        -- string is escaped.
        local from = i + select(2, text:sub(i, stop)
                                     :find('^{.-"payload"%s*:%s*'))
        out[#out + 1] = text:sub(from, skip_value(text, from) - 1)
        i = text:find("[{%]]", stop)
    end
    return out
end

-- opts: partition, group, batch, wait, timeout (ms), commitOnDelivery (or
-- autoAck, its name before Queen 2.0.2), raw (each payload as the JSON text
-- the broker sent, byte for byte). Returns the list of {id, partition,
-- attempts, payload}, empty when there is nothing.
function Client:pop(queue, opts)
    opts = opts or {}
    local params = {
        queue = queue, partition = opts.partition, group = opts.group,
        batch = opts.batch, timeout = opts.timeout,
        wait = opts.wait and "true" or nil,
        commitOnDelivery = (opts.commitOnDelivery or opts.autoAck) and "true"
                           or nil,
    }
    -- A parked pop may wait its whole timeout before answering; the socket
    -- must outlast it. Without one the broker's default applies, which an
    -- operator may raise up to the wire's ceiling of 300 s.
    local wait_s = opts.wait and ((opts.timeout or 300000) / 1000) or 0
    local r, text = exchange_at(self, owner_of(self, queue, opts.partition),
                                "GET", "/api/v1/ephemeral/pop"
                                .. query(params, POP_PARAMS), nil, wait_s)
    if not r then return nil, text end
    if opts.raw then
        for i, json in ipairs(payload_texts(text)) do
            r.messages[i].payload = json
        end
    end
    return r.messages
end

-- acks: ids, or {id = ..., status = "completed"|"failed"|"retry"}.
-- Returns the results, one {id, outcome} per ack.
function Client:ack(queue, acks, opts)
    opts = opts or {}
    local list = {}
    for i, a in ipairs(acks) do
        list[i] = type(a) == "table" and a or { id = a }
    end
    -- Built by hand: cjson writes an empty list as {}.
    local body = '{"queue":' .. cjson.encode(queue)
    if opts.group then body = body .. ',"group":' .. cjson.encode(opts.group) end
    local items = {}
    for i, a in ipairs(list) do items[i] = cjson.encode(a) end
    body = body .. ',"acks":[' .. concat(items, ",") .. "]}"
    local r, err = exchange_at(self, owner_of(self, queue, nil, list), "POST",
                               "/api/v1/ephemeral/ack", body)
    if not r then return nil, err end
    return r.results
end

-- Returns the stored declaration ({queue, options}).
function Client:configure(queue, options)
    -- cjson writes an empty table as {}, the empty options object.
    return self:request("POST", "/api/v1/ephemeral/configure",
                        cjson.encode({ queue = queue, options = options or {} }))
end

-- Returns how many messages were dropped.
function Client:reset(queue)
    local r, err = self:request("POST", "/api/v1/ephemeral/reset",
                                cjson.encode({ queue = queue }))
    if not r then return nil, err end
    return r.dropped
end

-- Returns {queue, deleted, declared}.
function Client:delete(queue)
    return self:request("DELETE", "/api/v1/ephemeral/queue/" .. escape(queue))
end

-- Returns {queues = {...}, count, cellBytes}.
function Client:queues()
    return self:request("GET", "/api/v1/ephemeral/queues")
end

-- Returns the depth read; opts.group for one group's view.
function Client:depth(queue, opts)
    opts = opts or {}
    return self:request("GET", "/api/v1/ephemeral/queues/" .. escape(queue)
                        .. "/depth" .. query({ group = opts.group },
                                             { "group" }))
end

-- The system routes the dashboard and `ephd status` read.
function Client:system()
    return self:request("GET", "/api/v1/system/ephemeral")
end

-- The broker's view of its cell: self {id, address, epoch}, members,
-- live, partitions {held, owned}.
function Client:cell()
    return self:request("GET", "/api/v1/system/cell")
end

-- The cell's placement view, as any identity may read it: {version, self,
-- tenant, hash, fresh, members = {{id, address, epoch}}}.
function Client:cell_view()
    return self:request("GET", "/api/v1/ephemeral/cell")
end

-- query: "limit=N" (the N biggest holders) or "tenant=UUID".
function Client:metering(query)
    return self:request("GET", "/api/v1/system/metering"
                               .. (query and ("?" .. query) or ""))
end

-- A tenant's queues for the operator (admin): the listing of queues(),
-- answered while the surface is paused too. tenant: the caller's when nil.
function Client:system_queues(tenant)
    return self:request("GET", "/api/v1/system/queues"
                        .. query({ tenant = tenant }, { "tenant" }))
end

-- Grants (admin). Returns {grants = {...}, count, requireGrant}.
function Client:grants()
    return self:request("GET", "/api/v1/system/grants")
end

-- grant: {tenant, enabled?, maxBytes?, maxQueues?, maxMsgsPerSec?}, the
-- whole row (a limit left out is the broker's default). Returns the grant
-- as stored; it holds from this answer on.
function Client:grant_set(grant)
    local r, err = self:request("POST", "/api/v1/system/grants",
                                cjson.encode(grant))
    if not r then return nil, err end
    return r.grant
end

-- Returns whether there was a grant to remove.
function Client:grant_delete(tenant)
    local r, err = self:request("DELETE", "/api/v1/system/grants/"
                                          .. escape(tenant))
    if not r then return nil, err end
    return r.deleted
end

return _M
