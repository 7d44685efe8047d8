"""The regression gate, its statistics, the stage machine and the promotion loop.

The core modules here are pure (no Flask, no Redis): they take data and `now`
and return data. Only the loop talks to the router, and only over HTTP.
"""
