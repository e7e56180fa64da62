"""Max-min fair rates by progressive filling, vectorised over a sparse load matrix.

The problem is given in coordinate form: entry ``e`` says that one unit of rate of variable
``cols[e]`` puts ``coef[e]`` units of load on resource ``rows[e]``. A variable is whatever
moves at one rate (an MRC QP's share of one plane, an RC connection whose striped QPs all
move at the pace of the slowest); a coefficient folds in how many connections the variable
stands for (symmetric aggregation), which share of its traffic crosses the resource (the
split over paths) and the wire overhead of loss (resends).

Progressive filling: every unfrozen variable grows at the same speed until a resource fills
(or a variable reaches its demand); the variables crossing a full resource freeze; repeat
with the rest. The result is the unique max-min fair allocation for fixed splits. Each round
is two ``np.bincount`` passes over the entries still active (a sparse matrix-vector product in
COO form), and the entries of frozen variables are dropped, so the work shrinks as it goes.
The number of rounds is the number of distinct bottleneck levels, which the Clos's symmetry
keeps small (a handful, even at 131,072 NICs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Resources that fill within this relative margin of the first one fill with it (ties).
FULL = 1e-9
#: After this many rounds (a problem without the Clos's symmetry, e.g. random loads), the
#: margin widens to ``LOOSE``: every rate is then within 1% of the exact max-min rate, and
#: the number of rounds stays bounded.
EXACT_ROUNDS = 100
LOOSE = 1e-2


@dataclass(frozen=True)
class Allocation:
    """Rates of every variable, and how the filling went (for the run's summary)."""

    rates: np.ndarray
    rounds: int
    remaining: np.ndarray | None = None  # capacity left on each resource


def max_min(rows: np.ndarray, cols: np.ndarray, coef: np.ndarray, capacity: np.ndarray,
            nvars: int, demand: np.ndarray | None = None,
            binds: np.ndarray | None = None) -> Allocation:
    """Max-min fair rates of ``nvars`` variables (see the module docstring).

    ``capacity``: per resource (length = number of resources). ``demand``: optional upper bound
    per variable (``inf`` = elastic). A variable without entries and without a finite demand
    is left at rate 0 (it crosses nothing the model knows, so it has no rate to find).
    ``binds``: per entry, whether a full resource stops the entry's variable (default: all).
    An entry that does not bind is load that has priority (ACKs on the control queue): it
    takes its share of the resource, which then fills sooner for the others, but it never
    holds its own variable back (it may overfill a resource by its own small growth).
    """
    rates = np.zeros(nvars)
    if nvars == 0:
        return Allocation(rates, 0, np.array(capacity, dtype=float))
    nres = len(capacity)
    remaining = np.array(capacity, dtype=float)
    bound = None if demand is None else np.asarray(demand, dtype=float)
    active = np.zeros(nvars, dtype=bool)
    active[cols] = True
    if bound is not None:
        active &= bound > 0
    r, c, k = rows, cols, coef
    b = np.ones(len(rows), dtype=bool) if binds is None else np.asarray(binds, dtype=bool)
    keep = active[c]
    if not keep.all():
        r, c, k, b = r[keep], c[keep], k[keep], b[keep]
    saturated = np.zeros(nres, dtype=bool)
    rounds = 0
    while r.size:
        rounds += 1
        tol = FULL if rounds <= EXACT_ROUNDS else LOOSE
        growth = np.bincount(r, weights=k, minlength=nres)
        loaded = np.flatnonzero((growth > 0) & ~saturated)
        until_full = np.maximum(remaining[loaded], 0.0) / growth[loaded]
        step = float(until_full.min()) if loaded.size else np.inf
        live = np.flatnonzero(active)
        capped = None
        if bound is not None:
            headroom = bound[live] - rates[live]
            step = min(step, float(headroom.min()))
            capped = live[np.isfinite(headroom) & (headroom <= step * (1 + tol))]
        if not np.isfinite(step):  # only non-binding load is left growing: nothing stops it
            break
        rates[live] += step
        grown = np.flatnonzero(growth > 0)
        remaining[grown] -= step * growth[grown]
        full = np.zeros(nres, dtype=bool)
        full[loaded[until_full <= step * (1 + tol) + 1e-300]] = True
        saturated |= full
        frozen = np.zeros(nvars, dtype=bool)
        frozen[c[saturated[r] & b]] = True
        if capped is not None:
            frozen[capped] = True
        active &= ~frozen
        keep = active[c]
        r, c, k, b = r[keep], c[keep], k[keep], b[keep]
    return Allocation(rates, rounds, remaining)
