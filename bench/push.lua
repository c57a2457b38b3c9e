-- wrk script: one single-message push per request, over keep-alive.
wrk.method = "POST"
wrk.path = "/api/v1/ephemeral/push"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"queue":"bench","messages":[{"payload":{"n":1}}]}'
