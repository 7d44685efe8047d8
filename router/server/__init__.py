"""The server's plumbing, shared by the API and the dashboard.

`settings` (validated configuration), `auth` (bearer tokens and scopes),
`errors` (every error rendered as JSON), `cache` (each worker's copy of the
binding table), `embedded` (the bundled Redis-protocol server), `logs` and
`metrics` (observability hooks).
"""
