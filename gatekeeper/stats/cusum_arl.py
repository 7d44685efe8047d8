"""Run lengths of the Bernoulli CUSUM, exactly, and the h that gives a wanted one.

The same (shift, h) alarms falsely at very different rates at p0 = 0.02 and
p0 = 0.50 (Reynolds and Stoumbos 1999), so h is derived from a target in-control
average run length (ARL0) at the p0 at hand instead of being fixed.

The detector (`statistics.Cusum`) adds 1 - k on an event and subtracts k on a
non-event, k = (p0 + p1) / 2, floored at 0, and alarms above h. On a lattice of
step 1/m with k approximated from below by a/m, the sum is a Markov chain on
0..floor(h m) (Brook and Evans, Biometrika 1972): from state i an event moves to
i + (m - a), anything else to max(0, i - a), and the ARL from each state solves
(I - Q) L = 1, a banded system solved here by elimination in O(states * a * (m - a)).
The lattice chain's increments are never smaller than the detector's (a/m <= k),
so it alarms no later: the real detector's ARL0 is at least the chain's, and an
h chosen on the chain is conservative.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import lru_cache
from operator import add, sub

#: Relative error allowed between k and its lattice approximation a/m (from below):
#: the chain then drifts down slightly slower than the detector, so h is at most a
#: few percent higher than the exact one.
K_TOLERANCE = 0.02
#: Largest lattice denominator tried.
MAX_DENOMINATOR = 400
#: h is searched on a grid of this many lattice steps per unit at most (bounds the solve).
MAX_STATES = 4_000


def lattice(k: float) -> tuple[int, int]:
    """(a, m) with a/m <= k, a >= 1, within K_TOLERANCE of k, cheapest chain first.

    The solve costs about m * a * (m - a) per unit of h, so among the lattices
    close enough to k the cheapest is taken.
    """
    if not 0.0 < k < 1.0:
        raise ValueError(f"k must be within (0, 1), got {k}")
    best: tuple[int, int] | None = None
    for m in range(2, MAX_DENOMINATOR + 1):
        a = math.floor(k * m)
        if 1 <= a < m and (k - a / m) <= K_TOLERANCE * k and (
                best is None or m * a * (m - a) < best[1] * best[0] * (best[1] - best[0])):
            best = (a, m)
    if best is None:
        # k is tiny (p0 near 0): one step down per run on a fine lattice.
        return 1, max(2, math.ceil(1.0 / k))
    return best


def chain_arl(p: float, a: int, m: int, top: int) -> float:
    """ARL from state 0 of the lattice CUSUM with event probability p and alarm above `top`."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be within [0, 1], got {p}")
    up, down, q = m - a, a, 1.0 - p
    size, width = top + 1, a + (m - a) + 1
    # Row i of A = I - Q in band storage: index t holds column i - down + t.
    rows: list[list[float]] = []
    for i in range(size):
        row = [0.0] * width
        row[down] = 1.0
        row[max(0, i - down) - i + down] -= q
        if i + up <= top:
            row[down + up] -= p
        rows.append(row)
    rhs = [1.0] * size
    # Gaussian elimination without pivoting: A is an M-matrix (weakly diagonally
    # dominant), and fill-in stays within the lower band `down` and upper band `up`.
    for col in range(size):
        pivot_row = rows[col]
        pivot = pivot_row[down]
        if pivot == 0.0:
            return math.inf
        tail = pivot_row[down:]
        for r in range(col + 1, min(size, col + down + 1)):
            row = rows[r]
            at = col - r + down
            factor = row[at]
            if factor == 0.0:
                continue
            factor /= pivot
            row[at:at + up + 1] = [x - factor * y for x, y in zip(row[at:at + up + 1], tail)]
            rhs[r] -= factor * rhs[col]
    solution = [0.0] * size
    for i in range(size - 1, -1, -1):
        row = rows[i]
        total = rhs[i]
        for t in range(1, min(up, size - 1 - i) + 1):
            total -= row[down + t] * solution[i + t]
        solution[i] = total / row[down]
    return solution[0]


def arl(p: float, p0: float, p1: float, h: float) -> float:
    """The ARL (runs until the first alarm, from s = 0) of the CUSUM tuned to (p0, p1, h)
    when the true event probability is p; a lower bound on the real detector's."""
    a, m = lattice((p0 + p1) / 2.0)
    return chain_arl(p, a, m, math.floor(h * m + 1e-9))


def lorden_h(p0: float, k: float, arl0: float) -> float:
    """An h at which the real detector's in-control ARL is at least arl0, in closed form.

    theta > 0 with p0 e^(theta (1 - k)) + (1 - p0) e^(-theta k) = 1 makes e^(theta S)
    a martingale along the detector's walk, so by Ville's inequality one walk from
    0 ever climbs over h with chance at most e^(-theta h); the CUSUM restarts such
    walks, and Lorden (1971) gives ARL0 >= e^(theta h). Conservative (it ignores
    the time spent near 0), but it needs no chain: h = ln(arl0) / theta.
    """
    if not 0.0 < p0 < k < 1.0:
        raise ValueError(f"need 0 < p0 < k < 1, got p0 {p0}, k {k}")

    def log_mgf(theta: float) -> float:
        # log(p0 e^(theta (1 - k)) + (1 - p0) e^(-theta k)), without overflow.
        up, down = math.log(p0) + theta * (1.0 - k), math.log1p(-p0) - theta * k
        top = max(up, down)
        return top + math.log(math.exp(up - top) + math.exp(down - top))

    # The log-mgf is 0 at 0, falls first (mean p0 - k < 0), then rises: bracket its root.
    low, high = 0.0, 1.0
    while log_mgf(high) <= 0.0:
        low, high = high, 2.0 * high
    for _ in range(100):
        middle = (low + high) / 2.0
        if log_mgf(middle) <= 0.0:
            low = middle
        else:
            high = middle
    # `low` is under the root: e^(low S) is a supermartingale, and the bound holds.
    return math.log(arl0) / low if low > 0.0 else math.inf


def chain_arls(p: float, a: int, m: int) -> Iterator[float]:
    """`chain_arl(p, a, m, top)` for top = 0, 1, 2, ... in turn, from one elimination.

    I - Q for a given top is the leading block of the unbounded chain's matrix (a
    jump over the top lands in a column the block does not have), so its LU factors
    without pivoting and its forward-eliminated right-hand side y are the leading
    parts of one elimination, computed here row by row exactly as `chain_arl` does.
    The row w with w U = e_0 is a leading part too (U is upper triangular), and the
    ARL from state 0 at top T is sum_{j <= T} w_j y_j: every term is nonnegative
    (LU of an M-matrix has inverse-positive factors), so the sum is as accurate as
    the back substitution, at O(a (m - a)) a top instead of a solve per top.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be within [0, 1], got {p}")
    up, down, q = m - a, a, 1.0 - p
    width = down + up + 1
    # U's rows from the diagonal on (columns i..i + up), and the forward-eliminated rhs.
    tails: list[list[float]] = []
    rhs: list[float] = []
    # seen[j]: sum over the rows i < j of w_i U[i][j], added as each w_i is found.
    seen = [0.0] * (up + 1)
    total = 0.0
    i = 0
    while True:
        row = [0.0] * width
        row[down] = 1.0
        row[max(0, i - down) - i + down] -= q
        row[down + up] -= p
        value = 1.0
        # The same updates, in the same order, as chain_arl's column-by-column sweep
        # (x - factor * y, element by element).
        for col in range(max(0, i - down), i):
            at = col - i + down
            factor = row[at]
            if factor == 0.0:
                continue
            tail = tails[col]
            factor /= tail[0]
            row[at:at + up + 1] = map(sub, row[at:at + up + 1], map(factor.__mul__, tail))
            value -= factor * rhs[col]
        tail = row[down:]
        if tail[0] == 0.0:
            break
        weight = ((1.0 if i == 0 else 0.0) - seen[i]) / tail[0]
        seen.append(0.0)
        seen[i + 1:] = map(add, seen[i + 1:], map(weight.__mul__, tail[1:]))
        tails.append(tail)
        rhs.append(value)
        if i >= down:
            tails[i - down] = []  # no later row reads it: free the memory
        total += weight * value
        yield total
        i += 1
    while True:  # a zero pivot: chain_arl answers inf from this top on
        yield math.inf


@lru_cache(maxsize=4096)
def h_for_arl(p0: float, p1: float, arl0: float) -> float:
    """The smallest h on the lattice whose in-control ARL (event probability p0) reaches
    arl0, or Lorden's closed-form h (`lorden_h`) when that is smaller.

    Both are conservative for the real detector, so the smaller is taken; and the
    lattice is searched only up to Lorden's h (and MAX_STATES): a p0 whose chain
    would need more states than that (a k barely over p0, a k whose lattice
    drifts up) still gets an h, never an error. The ARL grows with the top, and
    `chain_arls` gives every top's from one elimination, so the tops are walked up
    from 0 until one reaches the target: one solve's cost, where a secant search
    over separate solves took several (up to a second of CPU for one p0, in a view).
    """
    if not 0.0 < p0 < p1 < 1.0:
        raise ValueError(f"need 0 < p0 < p1 < 1, got p0 {p0}, p1 {p1}")
    if arl0 <= 1.0:
        raise ValueError(f"arl0 must be over 1, got {arl0}")
    k = (p0 + p1) / 2.0
    bound = lorden_h(p0, k, arl0)
    a, m = lattice(k)
    if a / m <= p0:
        # The lattice chain drifts up in control: its ARL grows only linearly in h.
        return bound
    cap = min(MAX_STATES, math.ceil(bound * m)) if math.isfinite(bound) else MAX_STATES
    target = math.log(arl0)
    for top, value in enumerate(chain_arls(p0, a, m)):
        if top > cap:
            break
        if math.log(value) >= target:
            return min(top / m, bound)
    return bound
