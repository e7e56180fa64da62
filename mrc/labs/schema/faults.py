"""``[[fault]]``: any number of entries, each a ``kind``, a ``target`` and a time.

A target is an element name or a selector (:mod:`topology.names`), resolved here to its
canonical name, or a class drawn from the seed (:mod:`mrc.labs.schema.targets`: ``"t1"``,
``"p1.t1.*"``), and it must be the kind of element the fault acts on. Every entry must lie
inside the run, and the entries together must make a consistent schedule
(:func:`mrc.labs.schema.schedule.check_fault_consistency`).
"""

from __future__ import annotations

from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.checks import check_keys, check_list, check_table
from mrc.labs.schema.fields import Derived, Field, field_map
from mrc.labs.schema.lab import FaultSpec, RunSpec
from mrc.labs.schema.schedule import check_fault_consistency
from mrc.labs.schema.targets import resolve_target
from topology import names
from topology.spec import FabricSpec

FAULT_KINDS = ("link_down", "link_up", "link_flap", "switch_down", "switch_up", "switch_reboot",
               "port_down", "port_up", "loss", "degrade", "drain", "ev_deny", "nic_stall",
               "blackhole")
KIND = Field("kind", "string", "what happens", choices=FAULT_KINDS)
TARGET = Field("target", "string", "the element it happens to: a name or a selector "
               "(topology.names), or a class drawn from run.seed (t0, t1, t0-t1-link, "
               "host-link, nic-port, or a name with * for an index: p1.t1.*)")
_IN_RUN = "inside the run: the fault ends by run.duration_us"
AT = Field("at_us", "number", "when it happens (inside the run)", unit="us", minimum=0,
           limit="before run.duration_us")
_WINDOW = Field("duration_us", "number", "how long it lasts", unit="us", gt=0,
                default=Derived("to the end of the run"), limit=_IN_RUN)
_COMMON = (KIND, TARGET, AT)

#: kind (in FAULT_KINDS order) -> its table: the common keys, then the kind's own.
FIELDS: dict[str, tuple[Field, ...]] = {
    "link_down": _COMMON,
    "link_up": _COMMON,
    "link_flap": (
        *_COMMON,
        Field("period_us", "number", "time from one down to the next", unit="us", gt=0,
              limit=_IN_RUN),
        Field("down_us", "number", "how long each down lasts (shorter than period_us)",
              unit="us", gt=0, limit="below period_us"),
        Field("count", "integer", "how many times the link goes down", minimum=1,
              maximum=100_000),
    ),
    "switch_down": _COMMON,
    "switch_up": _COMMON,
    "switch_reboot": (*_COMMON, Field("duration_us", "number", "how long it is down", unit="us",
                                      gt=0, missing=" (how long it is down)", limit=_IN_RUN)),
    "port_down": _COMMON,
    "port_up": _COMMON,
    "loss": (*_COMMON, Field("probability", "number", "chance that each packet is lost",
                             gt=0, maximum=1), _WINDOW),
    "degrade": (*_COMMON, Field("rate_fraction", "number", "share of the link rate left",
                                gt=0, lt=1), _WINDOW),
    "drain": (*_COMMON, _WINDOW),
    "ev_deny": (
        *_COMMON,
        Field("deny_mask", "integer", "the controller's deny mask: which EV bits are compared",
              minimum=0, maximum=2**32 - 1),
        Field("deny_value", "integer", "EVs with ev & deny_mask == deny_value become DENIED",
              minimum=0, maximum=2**32 - 1),
        Field("duration_us", "number", "how long the deny lasts (then the EVs are allowed "
              "again)", unit="us", gt=0, default=Derived("to the end of the run"),
              limit=_IN_RUN),
    ),
    "nic_stall": (*_COMMON, _WINDOW),
    "blackhole": (*_COMMON, Field("fraction", "number", "share of what the element forwards "
                                  "that it drops (its links and routes stay up)", gt=0,
                                  maximum=1, default=1.0), _WINDOW),
}
#: kind -> the keys it takes beyond kind, target and at_us.
FAULT_KEYS: dict[str, tuple[str, ...]] = {
    kind: tuple(f.key for f in table[len(_COMMON):]) for kind, table in FIELDS.items()}
_BY_KIND = {kind: field_map(table) for kind, table in FIELDS.items()}

#: What each fault kind may point at (element kinds from topology.names).
FAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "link_down": (names.LINK,), "link_up": (names.LINK,), "link_flap": (names.LINK,),
    "switch_down": (names.T0, names.T1), "switch_up": (names.T0, names.T1),
    "switch_reboot": (names.T0, names.T1),
    "port_down": (names.NIC_PORT,), "port_up": (names.NIC_PORT,),
    "loss": (names.LINK,), "degrade": (names.LINK, names.T0, names.T1),
    "drain": (names.T1, names.LINK),
    "ev_deny": (),  # "all" or a connection "hA->hB": not a fabric element
    "nic_stall": (names.HOST,),
    "blackhole": (names.LINK, names.T0, names.T1),
}
#: Kinds whose link target must be a T0-T1 link (a host link is a NIC's: use loss there).
_FABRIC_LINK_ONLY = {"drain": "a drain withdraws a T1 or a T0-T1 link through routing",
                     "blackhole": "a black hole is a switch that forwards nothing with its "
                     "links and routes up: a switch or a T0-T1 link (a host link that drops "
                     "packets is a loss fault)"}
_KIND_WORDS = {names.HOST: "host", names.NIC_PORT: "NIC port", names.T0: "T0 switch",
               names.T1: "T1 switch", names.LINK: "link"}
_TARGET_WORDS = {
    (names.LINK,): "a link (h3.p0--p0.t0.1 or p0.t0.1--p0.t1.2; selector h3.p0.uplink)",
    (names.T0, names.T1): "a switch (p0.t0.1, p0.t1.2; selector h3.p0.t0)",
    (names.NIC_PORT,): "a NIC port (h3.p0)",
    (names.T1, names.LINK): "a T1 switch (p0.t1.2) or a T0-T1 link (p0.t0.1--p0.t1.2): a "
    "drain withdraws it through routing (RC) and denies the EVs that cross its T1 (MRC)",
    (names.HOST,): "a host (h3): its NIC stops draining what it receives",
    (names.LINK, names.T0, names.T1): "a link (p0.t0.1--p0.t1.2) or a switch (p0.t1.2: every "
    "link of it)",
}


def faults(items: Any, spec: FabricSpec, run: RunSpec) -> tuple[FaultSpec, ...]:
    """Every ``[[fault]]`` entry, resolved, after checking they form one consistent schedule."""
    if isinstance(items, dict):
        raise LabError("write faults as [[fault]] entries (an array of tables), not [fault]",
                       "fault")
    items = check_list(items, "fault")
    out = tuple(_fault(i, body, spec, run) for i, body in enumerate(items))
    check_fault_consistency(out)
    return out


def _fault(i: int, body: Any, spec: FabricSpec, run: RunSpec) -> FaultSpec:
    prefix = f"fault.{i}"
    body = check_table(body, prefix)
    kind = KIND.read(body, prefix)
    fields = _BY_KIND[kind]
    for k in body:
        users = [other for other, keys in FAULT_KEYS.items() if k in keys]
        if k not in fields and users:
            raise LabError(f"{kind} takes no {k} (it belongs to {', '.join(users)})",
                           f"{prefix}.{k}")
    check_keys(body, fields, prefix)
    if kind == "ev_deny":
        return _ev_deny(i, body, spec, run, prefix, fields)
    target_text = TARGET.read(body, prefix)
    element, drawn_from = resolve_target(spec, target_text, run.seed, f"{prefix}.target")
    allowed = FAULT_TARGETS[kind]
    if element.kind not in allowed:
        raise LabError(f"{kind} needs {_TARGET_WORDS[allowed]}; {element.name!r} is a "
                       f"{_KIND_WORDS[element.kind]}", f"{prefix}.target")
    if kind in _FABRIC_LINK_ONLY and element.kind == names.LINK and element.t1 is None:
        raise LabError(f"{element.name!r} is a host link; {_FABRIC_LINK_ONLY[kind]}",
                       f"{prefix}.target")
    at = AT.read(body, prefix)
    if at >= run.duration_us:
        raise LabError(f"{at:g} us is not inside the run (duration_us = {run.duration_us:g})",
                       f"{prefix}.at_us")
    params: dict[str, Any] = {}
    until: float | None = None
    if kind == "link_flap":
        period = fields["period_us"].read(body, prefix)
        down = fields["down_us"].read(body, prefix)
        count = fields["count"].read(body, prefix)
        if down >= period:
            raise LabError(f"down_us ({down:g}) must be shorter than period_us ({period:g}) so "
                           "the link comes back up between flaps", f"{prefix}.down_us")
        params = {"period_us": period, "down_us": down, "count": count}
        until = at + (count - 1) * period + down
    elif "duration_us" in fields:  # a window: switch_reboot, loss, degrade, drain, nic_stall
        for k in ("probability", "rate_fraction", "fraction"):
            if k in fields:
                params[k] = fields[k].read(body, prefix)
        window = fields["duration_us"]
        duration = window.read(body, prefix) if "duration_us" in body or window.required \
            else None
        if duration is not None:
            params["duration_us"] = duration
            until = at + duration
    if until is not None and until > run.duration_us:
        raise LabError(f"{kind} lasts until {until:g} us, after the run ends "
                       f"(duration_us = {run.duration_us:g})", prefix)
    return FaultSpec(index=i, kind=kind, target=element.name, element=element, at_us=at,
                     until_us=until, params=params, drawn_from=drawn_from)


def _ev_deny(i: int, body: dict[str, Any], spec: FabricSpec, run: RunSpec, prefix: str,
             fields: dict[str, Field]) -> FaultSpec:
    """``ev_deny``: the controller denies EVs by mask and value (RTS -> RTS), on every MRC
    connection (target "all") or one ("h0->h4"), for a window or to the end of the run."""
    target = TARGET.read(body, prefix)
    if target != "all":
        src, sep, dst = target.partition("->")
        if not sep:
            raise LabError("ev_deny acts on \"all\" MRC connections or on one, written "
                           "\"h0->h4\"", f"{prefix}.target")
        hosts = []
        for h in (src.strip(), dst.strip()):
            try:
                element = names.resolve(spec, h)
            except names.UnknownElementError as exc:
                raise LabError(str(exc), f"{prefix}.target") from None
            if element.kind != names.HOST:
                raise LabError(f"{h!r} is a {_KIND_WORDS[element.kind]}, not a host",
                               f"{prefix}.target")
            hosts.append(element.name)
        target = f"{hosts[0]}->{hosts[1]}"
    at = AT.read(body, prefix)
    if at >= run.duration_us:
        raise LabError(f"{at:g} us is not inside the run (duration_us = {run.duration_us:g})",
                       f"{prefix}.at_us")
    mask = fields["deny_mask"].read(body, prefix)
    value = fields["deny_value"].read(body, prefix)
    if value & ~mask:
        raise LabError(f"deny_value {value:#010x} has bits outside deny_mask {mask:#010x}: it "
                       f"can deny no EV", f"{prefix}.deny_value")
    params: dict[str, Any] = {"deny_mask": mask, "deny_value": value}
    until = None
    if "duration_us" in body:
        params["duration_us"] = fields["duration_us"].read(body, prefix)
        until = at + params["duration_us"]
        if until > run.duration_us:
            raise LabError(f"ev_deny lasts until {until:g} us, after the run ends "
                           f"(duration_us = {run.duration_us:g})", prefix)
    return FaultSpec(index=i, kind="ev_deny", target=target, element=None, at_us=at,
                     until_us=until, params=params)
