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
from functools import lru_cache

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


@lru_cache(maxsize=4096)
def h_for_arl(p0: float, p1: float, arl0: float) -> float:
    """The smallest h on the lattice whose in-control ARL (event probability p0) reaches
    arl0, or Lorden's closed-form h (`lorden_h`) when that is smaller.

    Both are conservative for the real detector, so the smaller is taken; and the
    lattice is searched only up to Lorden's h (and MAX_STATES): a p0 whose chain
    would need more states than that (a k barely over p0, a k whose lattice
    drifts up) still gets an h, never an error. ln ARL0 grows about linearly in
    h, so the search steps by secant on it, alternating with bisection once the
    boundary is bracketed: a handful of solves, not a bisection's dozen.
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

    def log_arl(top: int) -> float:
        return math.log(chain_arl(p0, a, m, top))

    low, f_low = 0, log_arl(0)
    if f_low >= target:
        return 0.0
    high = min(cap, m)
    f_high = log_arl(high)
    # Grow the bracket by secant until its top reaches the target (or the cap).
    while f_high < target:
        if high >= cap:
            return bound
        slope = (f_high - f_low) / (high - low)
        guess = 2 * high if slope <= 0.0 else math.ceil(high + 1.1 * (target - f_high) / slope)
        guess = min(cap, max(high + 1, guess))
        low, f_low, high, f_high = high, f_high, guess, log_arl(guess)
    # Close in: secant and bisection in turn (the secant alone can stall at one end).
    secant = True
    while high - low > 1:
        slope = (f_high - f_low) / (high - low)
        if secant and slope > 0.0:
            guess = round(low + (target - f_low) / slope)
        else:
            guess = (low + high) // 2
        guess = min(high - 1, max(low + 1, guess))
        f_guess = log_arl(guess)
        if f_guess >= target:
            high, f_high = guess, f_guess
        else:
            low, f_low = guess, f_guess
        secant = not secant
    return min(high / m, bound)
