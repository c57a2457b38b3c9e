-- What a web page may not make a browser do: POST a body that is not JSON,
-- or send anything from another origin unless the operator allows it.
local helper = require("helper")

describe("ephd.browser", function()
    local browser
    before_each(function()
        helper.core_double({})
        browser = require("ephd.browser")
    end)

    local function foreign(t)
        local req, anchor = helper.request(t)
        local why = browser.foreign(req)
        assert.truthy(anchor) -- the request's strings lived until here
        return why
    end

    it("lets in requests no browser marked as foreign", function()
        assert.is_nil(foreign({}))
        assert.is_nil(foreign({ host = "broker:6632" }))
        assert.is_nil(foreign({ fetch_site = "same-origin" }))
        assert.is_nil(foreign({ fetch_site = "none" }))
        assert.is_nil(foreign({ origin = "http://broker:6632",
                                host = "broker:6632",
                                fetch_site = "same-origin" }))
        assert.is_nil(foreign({ origin = "HTTP://Broker:6632",
                                host = "broker:6632" }))
    end)

    it("refuses another origin, a null one, and another site", function()
        assert.truthy(foreign({ origin = "http://evil.example",
                                host = "broker:6632" }))
        assert.truthy(foreign({ origin = "http://broker:6633",
                                host = "broker:6632" }))
        assert.truthy(foreign({ origin = "null", host = "broker:6632" }))
        assert.truthy(foreign({ origin = "http://broker:6632" }))
        assert.truthy(foreign({ origin = "http://broker:6632/x",
                                host = "broker:6632/x" }))
        assert.truthy(foreign({ fetch_site = "cross-site" }))
        assert.truthy(foreign({ fetch_site = "Same-Site" }))
    end)

    it("lets in the origins the operator lists, or every one", function()
        browser.allow("https://app.example,null")
        assert.is_nil(foreign({ origin = "https://APP.example",
                                host = "broker:6632",
                                fetch_site = "cross-site" }))
        assert.is_nil(foreign({ origin = "null", host = "broker:6632" }))
        assert.truthy(foreign({ origin = "https://other.example",
                                host = "broker:6632" }))
        assert.truthy(foreign({ fetch_site = "cross-site" }))
        browser.allow("*")
        assert.is_nil(foreign({ origin = "https://other.example",
                                host = "broker:6632" }))
        assert.is_nil(foreign({ fetch_site = "cross-site" }))
        browser.allow("")
    end)

    local function not_json(content_type, body)
        local req, anchor = helper.request({ content_type = content_type,
                                             body = body })
        local why = browser.not_json(req)
        assert.truthy(anchor)
        return why
    end

    it("takes C's word for a Content-Type of exactly application/json",
       function()
        local req, anchor = helper.request({ content_type = "text/plain",
                                             body = "{}" })
        assert.truthy(browser.not_json(req))
        req.json = 1
        assert.is_nil(browser.not_json(req))
        assert.truthy(anchor)
    end)

    it("takes application/json bodies, with parameters, in any case",
       function()
        assert.is_nil(not_json("application/json", "{}"))
        assert.is_nil(not_json("Application/JSON", "{}"))
        assert.is_nil(not_json("application/json; charset=utf-8", "{}"))
        assert.is_nil(not_json("application/json;charset=UTF-8", "{}"))
        assert.is_nil(not_json("application/vnd.api+json", "{}"))
        assert.is_nil(not_json("Application/Problem+JSON ; x=y", "{}"))
        assert.truthy(not_json("application/json-seq", "{}"))
        assert.truthy(not_json("text/plain+json", "{}"))
        assert.is_nil(not_json(nil, ""))
    end)

    it("refuses any other body", function()
        assert.truthy(not_json("text/plain", "{}"))
        assert.truthy(not_json("text/plain;charset=UTF-8", "{}"))
        assert.truthy(not_json("application/x-www-form-urlencoded", "{}"))
        assert.truthy(not_json("multipart/form-data; boundary=x", "{}"))
        assert.truthy(not_json("application/jsonp", "{}"))
        assert.truthy(not_json(nil, "{}"))
    end)
end)
