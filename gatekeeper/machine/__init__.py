"""The stage machine: the table of legal moves, and decide(), what the gatekeeper does with a role each tick.

Pure: a gate view and `now` in, a decision out; no Flask, no Redis.
"""
