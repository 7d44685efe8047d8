"""The offline regression suite: fixed scenarios, repeated runs, the same gate as production.

Pure parts (scenario models, comparison, reports) beside thin I/O edges (the
workspace, the agent subprocess, the loopback tool proxy). Nothing here imports
Flask; the router only receives the verdict over HTTP.
"""
