"""The gate's state in Redis: traces and their aggregates, drift and paired state, feedback, configs.

The config registry (`configs`) lives here too: a config's record holds its
spec and the criteria the gate generates from it.

Thin I/O around the pure core: each store reads and writes Redis and hands
the numbers to `gatekeeper.window`, `gatekeeper.stats.drift` and `gatekeeper.stats.pairing`.
Per-role keys carry the role as a Redis Cluster hash tag (`trace_keys`).
"""
