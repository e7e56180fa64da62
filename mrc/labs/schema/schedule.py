"""A lab's faults as a timed schedule: each ``[[fault]]`` entry expands to primitives.

A ``link_flap`` becomes its down/up pairs, a ``switch_reboot`` a down and an up, a window
(loss, degrade, drain) a start and an end. The schedule is data: :mod:`mrc.labs.run.faults`
binds each primitive to the running stack, and validation walks the same schedule to refuse
contradictions (a switch taken down twice, an up while up) before anything runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.lab import FaultSpec, Lab
from mrc.sim.faults import ACTION_STATES


@dataclass(frozen=True)
class FaultAction:
    """One timed primitive a fault expands to (``link_flap`` gives ``count`` down/up pairs)."""

    time_us: float
    action: str  # link_down link_up switch_down switch_up port_down port_up loss_start
    #              loss_end degrade_start degrade_end drain_start drain_end stall_start
    #              stall_end
    target: str
    fault: int  # index of the [[fault]] entry
    params: dict[str, Any] = field(default_factory=dict)


_ACTION_OF = {"link_down": "link_down", "link_up": "link_up", "switch_down": "switch_down",
              "switch_up": "switch_up", "port_down": "port_down", "port_up": "port_up"}
_WINDOW_ACTIONS = {"switch_reboot": ("switch_down", "switch_up"),
                   "loss": ("loss_start", "loss_end"),
                   "degrade": ("degrade_start", "degrade_end"),
                   "drain": ("drain_start", "drain_end"),
                   "ev_deny": ("ev_deny_start", "ev_deny_end"),
                   "nic_stall": ("stall_start", "stall_end"),
                   "blackhole": ("blackhole_start", "blackhole_end")}


def expand(fault: FaultSpec) -> Iterator[FaultAction]:
    """The timed primitives of one fault, in time order."""
    if fault.kind in _ACTION_OF:
        yield FaultAction(fault.at_us, _ACTION_OF[fault.kind], fault.target, fault.index)
    elif fault.kind == "link_flap":
        p = fault.params
        for k in range(p["count"]):
            t = fault.at_us + k * p["period_us"]
            yield FaultAction(t, "link_down", fault.target, fault.index, {"flap": k})
            yield FaultAction(t + p["down_us"], "link_up", fault.target, fault.index, {"flap": k})
    else:
        start, end = _WINDOW_ACTIONS[fault.kind]
        extra = {k: v for k, v in fault.params.items() if k != "duration_us"}
        yield FaultAction(fault.at_us, start, fault.target, fault.index, extra)
        if fault.until_us is not None:
            yield FaultAction(fault.until_us, end, fault.target, fault.index,
                              extra if fault.kind == "ev_deny" else {})


def schedule(faults: tuple[FaultSpec, ...] | list[FaultSpec]) -> list[FaultAction]:
    """All primitives of a lab, sorted by time then by their order in the file."""
    actions = [a for f in faults for a in expand(f)]
    return sorted(actions, key=lambda a: (a.time_us, a.fault))


# (action -> (state family, new state)); an action must change its family's state.
_TRANSITIONS = ACTION_STATES
_STATE_WORDS = {("down", True): "already down", ("down", False): "not down",
                ("loss", True): "already lossy", ("loss", False): "not lossy",
                ("degrade", True): "already degraded", ("degrade", False): "not degraded",
                ("drain", True): "already drained", ("drain", False): "not drained",
                ("ev_deny", True): "already under an EV deny",
                ("ev_deny", False): "not under an EV deny",
                ("stall", True): "already stalled", ("stall", False): "not stalled",
                ("blackhole", True): "already a black hole",
                ("blackhole", False): "not a black hole"}


def check_fault_consistency(faults: tuple[FaultSpec, ...]) -> None:
    """Refuse contradictory schedules: an element taken down twice, brought up while up,
    overlapping windows of the same kind on one element, or a down and up at one instant."""
    state: dict[tuple[str, str], tuple[bool, int, float]] = {}
    for action in schedule(faults):
        family, new = _TRANSITIONS[action.action]
        key = (family, action.target)
        current, by, since = state.get(key, (False, -1, 0.0))
        if current == new:
            word = _STATE_WORDS[(family, new)]
            because = f" (since {since:g} us, fault.{by})" if by >= 0 else ""
            raise LabError(f"{action.action.replace('_', ' ')} of {action.target} at "
                           f"{action.time_us:g} us contradicts the schedule: it is {word} then"
                           f"{because}", f"fault.{action.fault}")
        if by >= 0 and since == action.time_us and by != action.fault:
            raise LabError(f"{action.action.replace('_', ' ')} of {action.target} at "
                           f"{action.time_us:g} us happens at the same instant as fault.{by}; "
                           "the order would be ambiguous", f"fault.{action.fault}")
        if action.action == "drain_start":
            _check_drain_alive(action, state)
        state[key] = (new, action.fault, action.time_us)


def _check_drain_alive(action: FaultAction, state: dict[tuple[str, str], tuple[bool, int, float]]
                       ) -> None:
    """A drain shifts traffic away from a live element: draining one that is down (itself,
    or for a link either end switch) is a contradiction."""
    for name in (action.target, *action.target.split("--")[:2 if "--" in action.target else 0]):
        down, by, since = state.get(("down", name), (False, -1, 0.0))
        if down:
            raise LabError(f"drain of {action.target} at {action.time_us:g} us: {name} is down "
                           f"then (since {since:g} us, fault.{by}); a drain shifts traffic away "
                           "from a live element", f"fault.{action.fault}")


def fault_windows(lab: Lab) -> list[dict[str, Any]]:
    """``[{kind, target, at_us, until_us}]`` per [[fault]] entry, for summaries and plots.

    A ``*_down`` lasts until the matching ``*_up`` of the same element (None if never);
    an ``*_up`` is an instant (``until_us == at_us``); windows end at ``at_us + duration``.
    """
    out = []
    ups = {"link_down": "link_up", "switch_down": "switch_up", "port_down": "port_up"}
    for f in lab.faults:
        until = f.until_us
        if f.kind in ups:
            later = [g.at_us for g in lab.faults
                     if g.kind == ups[f.kind] and g.target == f.target and g.at_us > f.at_us]
            until = min(later) if later else None
        elif f.kind in ups.values():
            until = f.at_us
        out.append({"kind": f.kind, "target": f.target, "at_us": f.at_us, "until_us": until})
    return out
