"""Fault schedules as the flow model sees them: timed changes of a set of active conditions.

A lab's ``[[fault]]`` entries expand (``mrc.labs.schema.schedule.schedule``) into timed primitives
(``link_down``, ``switch_up``, ``loss_start``...). Here they become *conditions*, keyed by
(family, element): ``("down", "p0.t1.3")``, ``("loss", link) -> p``, ``("degrade", link) ->
fraction``, ``("drain", t1)``, ``("blackhole", element) -> fraction`` (it forwards
nothing, or drops that fraction, with its links up: dead or lossy for both transports,
invisible to RC's routing, :mod:`mrc.flow.routing`), ``("stall", host)`` (``nic_stall``: a stuck NIC drops what
it receives, so every connection to or from it stops: its data or its ACKs are lost). The
fabric's state over an interval is the set of active
conditions, so two intervals with equal sets have equal rates (a flapping link costs two
solves, not one per flap). As in the simulator, a link is unusable while *any* cause holds it
down (its own ``link_down``, a dead switch at either end, a dead NIC port).

Each transport sees the fabric through its own *view*:

* RC sees it as it is (a dead path simply stops its QP; the NAK or the retry timer decides
  the rest, :mod:`mrc.flow.engine`), and its routing moves its QPs off a dead or drained
  T1 on routing's own clock (:mod:`mrc.flow.routing`).
* MRC stops using a path when it dies and uses it again only after its probes prove it
  healthy: ``probes_to_reintegrate`` answered probes, ``probe_interval`` apart, so an ``up``
  takes effect ``K x probe_interval`` later in MRC's view (an element that goes down again
  within that time never came back, for MRC); a black hole likewise (its probes are lost
  until it ends, so MRC maps its paths out as it does a dead one). A drain (DENIED) takes effect at once and ends
  at once (``allow`` without validation), as ``SimStack.allow`` does. A dead path leaves
  MRC's view at the fault instant (the rates it settles at); what it costs until MRC's
  timers find it is :mod:`mrc.flow.detection`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mrc.sim.faults import ACTION_STATES

#: action -> (family, starts?): every schedule action but ev_deny (deny masks pick single
#: EVs; the flow model counts EVs per path and refuses them before running)
ACTIONS: dict[str, tuple[str, bool]] = {
    action: state for action, state in ACTION_STATES.items() if state[0] != "ev_deny"}
#: Families whose end MRC trusts only after its probes (a path that comes back).
_PROBED = ("down", "stall", "blackhole")
_VALUE = {"loss": "probability", "degrade": "rate_fraction", "blackhole": "fraction"}

Conditions = frozenset[tuple[tuple[str, str], float]]


@dataclass(frozen=True)
class Change:
    """One timed primitive, in integer picoseconds (the labs' ``FaultAction`` converted)."""

    time_ps: int
    action: str
    target: str
    fault: int = 0
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return ACTIONS[self.action][0]

    @property
    def starts(self) -> bool:
        return ACTIONS[self.action][1]

    @property
    def key(self) -> tuple[str, str]:
        return (self.family, self.target)

    @property
    def value(self) -> float:
        name = _VALUE.get(self.family)
        return float(self.params.get(name, 1.0)) if name else 1.0


def check_actions(changes: Iterable[Change]) -> None:
    """Refuse an action the flow model does not know (the lab schema never makes one)."""
    for change in changes:
        if change.action not in ACTIONS:
            raise ValueError(f"the flow model does not implement fault action {change.action!r}")


def apply(active: dict[tuple[str, str], float], change: Change) -> None:
    """Update the active conditions with one change (in place)."""
    if change.starts:
        active[change.key] = change.value
    else:
        active.pop(change.key, None)


def freeze(active: Mapping[tuple[str, str], float]) -> Conditions:
    return frozenset(active.items())


def rc_view(changes: list[Change]) -> list[Change]:
    """RC's view: the fabric as it is; drains deny MRC EVs and change nothing for RC."""
    return [c for c in changes if c.family != "drain"]


def mrc_view(changes: list[Change], reintegrate_ps: int) -> list[Change]:
    """MRC's view: ``up`` changes delayed by ``reintegrate_ps`` (probing), cancelled when the
    element goes down again first; everything else as it happens. Sorted by time, stable."""
    out: list[Change] = []
    pending: dict[str, Change] = {}  # target -> its delayed up, not yet effective
    for change in sorted(changes, key=lambda c: c.time_ps):
        if change.family in _PROBED:
            late = pending.get(change.target)
            if late is not None and late.time_ps > change.time_ps:
                if change.starts:  # down again before MRC trusted it: it never came back
                    out.remove(late)
                    del pending[change.target]
                    continue
            if not change.starts:
                delayed = Change(change.time_ps + reintegrate_ps, change.action, change.target,
                                 change.fault, change.params)
                pending[change.target] = delayed
                out.append(delayed)
                continue
        out.append(change)
    return sorted(out, key=lambda c: c.time_ps)
