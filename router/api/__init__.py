"""The HTTP API: one blueprint module per resource under /v1, plus /healthz.

Each module exposes `bp` and may expose `init_app(app)`; `router.app` registers
them. Request helpers shared by the blueprints: `params` (path and query
parameters, If-Match) and `bodies` (JSON bodies parsed and validated into models).
A request starts here, reads the stores in `bindings` and `gatekeeper.store`,
and computes with the pure `gatekeeper` core.
"""
