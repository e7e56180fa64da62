"""A lab's ``[[fault]]`` schedule turned into timed calls on a running stack.

Faults are data: :func:`mrc.labs.schema.schedule.schedule` expands the lab's entries into timed
primitives (a ``link_flap`` becomes its down/up pairs, a ``switch_reboot`` a down and an up,
windows a start and an end); this module only binds each primitive to the simulator's fault
functions (:mod:`mrc.sim.faults`, which maps a window's start and end to them) or to the
operator API (``stack.deny``/``stack.allow`` for drains, ``stack.deny_by_mask`` for the
controller's ``ev_deny``) and logs it as an event row, so events.csv shows every fault next
to what the transports did about it.
"""

from __future__ import annotations

from typing import Any

from mrc.labs.schema.lab import Lab
from mrc.labs.schema.schedule import FaultAction, schedule
from mrc.sim import faults as sim_faults
from mrc.sim.faults import SCHEDULE_ACTIONS
from mrc.units import PS_PER_US
from topology import names

DRAIN_ACTIONS = ("drain_start", "drain_end")
EV_DENY_ACTIONS = ("ev_deny_start", "ev_deny_end")
ACTIONS = (*SCHEDULE_ACTIONS, *DRAIN_ACTIONS, *EV_DENY_ACTIONS)


def action_time_ps(action: FaultAction) -> int:
    return int(round(action.time_us * PS_PER_US))


def install(stack: Any, lab: Lab) -> list[FaultAction]:
    """Schedule every fault primitive of ``lab`` on ``stack.sim``; returns them in order."""
    actions = schedule(lab.faults)
    for action in actions:
        stack.sim.at(action_time_ps(action), _fire, (stack, lab, action))
    return actions


def _fire(arg: tuple[Any, Lab, FaultAction]) -> None:
    stack, lab, action = arg
    apply(stack, lab, action)


def _drain(stack: Any, lab: Lab, action: FaultAction, now: int, detail: dict[str, Any]) -> None:
    """One fault kind, both transports: MRC's operator denies the EVs crossing the T1 (for a
    link drain: the EVs of the connections under the link's T0 that cross its T1), and the
    fabric withdraws the element through routing (RC's traffic shifts away after
    ``routing_convergence_us``)."""
    element = names.resolve(lab.fabric, action.target)
    on = action.action == "drain_start"
    t0 = element.t0 if element.kind == names.LINK else None
    if on:
        changed = stack.deny(now, element.plane, element.t1, t0=t0)
    else:
        changed = stack.allow(now, element.plane, element.t1, t0=t0)
    if isinstance(changed, int):  # RC has no EVs: a drain changes nothing there
        detail["evs_changed"] = changed
    net = getattr(stack, "net", None)
    if net is not None and net.routing is not None:
        net.routing.drain(element.name, on)


def apply(stack: Any, lab: Lab, action: FaultAction) -> None:
    """Run one primitive now and log it (kind = the primitive, detail = what it did)."""
    now = stack.sim.now
    detail: dict[str, Any] = {"fault": action.fault, **action.params}
    if 0 <= action.fault < len(lab.faults) and lab.faults[action.fault].drawn_from:
        detail["drawn_from"] = lab.faults[action.fault].drawn_from  # (schema/targets.py)
    if action.action in DRAIN_ACTIONS:
        _drain(stack, lab, action, now, detail)
    elif action.action in EV_DENY_ACTIONS:
        pair = None
        if action.target != "all":
            src, dst = action.target.split("->")
            pair = (names.resolve(lab.fabric, src).index, names.resolve(lab.fabric, dst).index)
        changed = stack.deny_by_mask(now, action.params["deny_mask"],
                                     action.params["deny_value"], pair=pair,
                                     allow=action.action == "ev_deny_end")
        detail["evs_changed"] = changed
    else:
        name, kwargs = sim_faults.primitive(action.action, action.params)
        kernel = getattr(stack, "apply_fault", None)  # the kernel runtime: real interfaces
        if kernel is not None:
            effect = kernel(name, action.target, **kwargs)
        else:
            # the live runtime's stack has the same network, run by its fabric against the clock
            effect = sim_faults.apply(stack.net, name, action.target, **kwargs).effect
        detail.update({k: v for k, v in effect.items() if isinstance(v, int | float | str | bool)})
    stack.note_event(now, action.action, action.target, **detail)
