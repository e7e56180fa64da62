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

#: A resource counts as full when less than this share of its capacity is left.
FULL = 1e-9


@dataclass(frozen=True)
class Allocation:
    """Rates of every variable, and how the filling went (for the run's summary)."""

    rates: np.ndarray
    rounds: int


def max_min(rows: np.ndarray, cols: np.ndarray, coef: np.ndarray, capacity: np.ndarray,
            nvars: int, demand: np.ndarray | None = None) -> Allocation:
    """Max-min fair rates of ``nvars`` variables (see the module docstring).

    ``capacity``: per resource (length = number of resources). ``demand``: optional upper bound
    per variable (``inf`` = elastic). A variable without entries and without a finite demand
    is left at rate 0 (it crosses nothing the model knows, so it has no rate to find).
    """
    rates = np.zeros(nvars)
    if nvars == 0:
        return Allocation(rates, 0)
    nres = len(capacity)
    remaining = capacity.astype(float).copy()
    cap_floor = FULL * np.maximum(capacity, 1e-300)
    bound = np.full(nvars, np.inf) if demand is None else demand.astype(float)
    active = np.zeros(nvars, dtype=bool)
    active[cols] = True
    active &= bound > 0
    keep = active[cols]
    r, c, k = rows[keep], cols[keep], coef[keep]
    rounds = 0
    while r.size:
        rounds += 1
        growth = np.bincount(r, weights=k, minlength=nres)
        loaded = growth > 0
        step = float(np.min(remaining[loaded] / growth[loaded]))
        live = np.flatnonzero(active)
        headroom = bound[live] - rates[live]
        step = max(0.0, min(step, float(np.min(headroom))))
        rates[live] += step
        remaining -= step * growth
        full = loaded & (remaining <= cap_floor)
        frozen = np.zeros(nvars, dtype=bool)
        frozen[c[full[r]]] = True
        frozen[live[headroom - step <= FULL * np.maximum(bound[live], 1.0)]] = True
        if not frozen.any():  # numerical corner: freeze the tightest resource's variables
            tight = loaded & (remaining <= np.min(remaining[loaded]) + cap_floor)
            frozen[c[tight[r]]] = True
        active &= ~frozen
        keep = active[c]
        r, c, k = r[keep], c[keep], k[keep]
        np.maximum(remaining, 0.0, out=remaining)
    return Allocation(rates, rounds)
