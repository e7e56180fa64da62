"""A lab's ``[[fault]]`` schedule turned into timed calls on a running stack.

Faults are data: :func:`mrc.labs.schema.schedule` expands the lab's entries into timed
primitives (a ``link_flap`` becomes its down/up pairs, a ``switch_reboot`` a down and an up,
windows a start and an end); this module only binds each primitive to the simulator's fault
functions (:mod:`mrc.sim.faults`) or to the operator API (``stack.deny``/``stack.allow``
for drains) and logs it as an event row, so events.csv shows every fault next to what the
transports did about it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mrc.labs.model import Lab
from mrc.labs.schedule import FaultAction, schedule
from mrc.units import PS_PER_US
from topology import names

#: our action -> (mrc.sim.faults primitive, keyword arguments from the action's params)
_SIM_ACTIONS: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "link_down": ("link_down", lambda p: {}),
    "link_up": ("link_up", lambda p: {}),
    "switch_down": ("switch_down", lambda p: {}),
    "switch_up": ("switch_up", lambda p: {}),
    "port_down": ("nic_port_down", lambda p: {}),
    "port_up": ("nic_port_up", lambda p: {}),
    "loss_start": ("set_loss", lambda p: {"p": p["probability"]}),
    "loss_end": ("set_loss", lambda p: {"p": 0.0}),
    "degrade_start": ("degrade", lambda p: {"fraction": p["rate_fraction"]}),
    "degrade_end": ("degrade", lambda p: {"fraction": 1.0}),
    "stall_start": ("nic_stall", lambda p: {}),
    "stall_end": ("nic_resume", lambda p: {}),
}
DRAIN_ACTIONS = ("drain_start", "drain_end")
ACTIONS = (*_SIM_ACTIONS, *DRAIN_ACTIONS)


def primitive(action: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The ``mrc.sim.faults`` primitive a lab-schedule action runs, and its arguments."""
    try:
        name, kwargs = _SIM_ACTIONS[action]
    except KeyError:
        raise ValueError(f"the fabric does not implement fault {action!r}") from None
    return name, kwargs(params)


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


def apply(stack: Any, lab: Lab, action: FaultAction) -> None:
    """Run one primitive now and log it (kind = the primitive, detail = what it did)."""
    now = stack.sim.now
    detail: dict[str, Any] = {"fault": action.fault, **action.params}
    if action.action in DRAIN_ACTIONS:
        element = names.resolve(lab.fabric, action.target)
        if action.action == "drain_start":
            changed = stack.deny(now, element.plane, element.t1)
        else:
            changed = stack.allow(now, element.plane, element.t1)
        if isinstance(changed, int):  # RC has no EVs: a drain changes nothing there
            detail["evs_changed"] = changed
    else:
        from mrc.sim import faults as sim_faults

        name, kwargs = primitive(action.action, action.params)
        # the live runtime's stack has the same network, run by its fabric against the clock
        effect = sim_faults.apply(stack.net, name, action.target, **kwargs).effect
        detail.update({k: v for k, v in effect.items() if isinstance(v, int | float | str | bool)})
    stack.note_event(now, action.action, action.target, **detail)
