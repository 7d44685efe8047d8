"""The gate's statistical tests: sequential tests, CUSUM drift alarms, the alpha budget, paired flips.

Pure: counts in, verdicts out; no Flask, no Redis.
"""
