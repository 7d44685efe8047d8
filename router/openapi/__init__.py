"""The OpenAPI 3.1 document served at /openapi.json.

`document` (the blueprint and the assembled document), `paths` and `more`
(the path items, one entry per route; a test fails when a route is missing).
"""
