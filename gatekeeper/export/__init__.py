"""Stored runs out to an OTLP/HTTP collector (`ROLEGATE_EXPORT_OTLP_ENDPOINT`).

`otlp_spans` turns a stored run into a span (pure), `otlp_send` posts a batch and
says whether to retry, keep or drop it, `exporter` is the loop: one leader by
lease, reading every role's streams after a cursor kept in Redis
(`gatekeeper.store.export_cursor`).
"""
