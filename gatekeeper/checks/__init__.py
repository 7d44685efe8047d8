"""What is checked on a run: invariants, spec criteria, trajectories, review by criterion, references, golden sets.

Pure: traces and specs in, verdicts out; no Flask, no Redis.
"""
