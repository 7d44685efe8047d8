"""The gate view: read the stores, compute every section, return plain data.

`gate_view()` in `gatekeeper.view.build` is the one function the API
(`GET /v1/roles/<role>/gate`), the dashboard and the benches call; it imports
no Flask. `context` holds what a view is computed from.
"""
