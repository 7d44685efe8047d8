"""The exact McNemar p-value: linear (term from term) against the plain sum of math.comb terms.

    .venv/bin/python -m bench.mcnemar_exact [--sizes 2000 8000 40500] [--baseline-max 8000]

For each number of discordant pairs n (regressions n/2 + n/100, the rest
improvements: a near-balanced case, the slowest for both), times
`gatekeeper.stats.statistics.mcnemar_exact` and, up to --baseline-max, the plain
quadratic sum it replaced (a separate minimal function below), checks the
floats are identical and prints the ratio.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gatekeeper.stats.statistics import mcnemar_exact


def plain_cdf_half(k: int, n: int) -> float:
    """P(X <= k), X ~ Binomial(n, 1/2): one math.comb per term, one exact division."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return sum(math.comb(n, i) for i in range(k + 1)) / (1 << n)


def plain_mcnemar(regressions: int, improvements: int) -> tuple[float, float]:
    """The quadratic McNemar the gate used before."""
    n = regressions + improvements
    if n == 0:
        return (1.0, 1.0)
    return (plain_cdf_half(improvements, n),
            min(1.0, 2.0 * plain_cdf_half(min(regressions, improvements), n)))


def timed(call: object, *args: int) -> tuple[float, tuple[float, float]]:
    """Seconds for one call, and its answer."""
    assert callable(call)
    started = time.perf_counter()
    answer = call(*args)
    return time.perf_counter() - started, answer


def main(argv: list[str] | None = None) -> None:
    """Time both at each size and print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 8000, 40500])
    parser.add_argument("--baseline-max", type=int, default=8000)
    args = parser.parse_args(argv)
    print(f"{'discordant':>10} {'linear ms':>10} {'plain ms':>10} {'ratio':>8} {'same':>5}")
    for n in args.sizes:
        regressions = n // 2 + n // 100
        improvements = n - regressions
        fast, answer = timed(mcnemar_exact, regressions, improvements)
        if n <= args.baseline_max:
            slow, expected = timed(plain_mcnemar, regressions, improvements)
            print(f"{n:>10} {fast * 1e3:>10.1f} {slow * 1e3:>10.1f} {slow / fast:>8.0f} "
                  f"{answer == expected!s:>5}")
        else:
            print(f"{n:>10} {fast * 1e3:>10.1f} {'(skipped)':>10} {'':>8} {'':>5}")


if __name__ == "__main__":
    main()
