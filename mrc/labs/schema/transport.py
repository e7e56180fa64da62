"""``[transport.NAME]``: one table per transport compared, its keys the transport's config.

``NAME`` is unique; ``kind = "mrc"`` or ``"rc"`` unless NAME is itself a kind. The keys are
the fields of the transport's config (``MrcConfig`` with its nested ``cc`` table, or
``RcConfig``), with microseconds where the config stores picoseconds (``probe_interval_us``
sets ``probe_interval_ps``) and the fabric filling in what it knows (MTU, line rate, base
RTT, RC's window). A config field declared as a knob (:mod:`mrc.knobs`) is a lab key with
everything read from it: type and default from the field, documentation, unit, range and
the words that refuse a value from its knob, so a new knob needs nothing here (the nested
``cc`` table, ``CcConfig``'s knobs, lists them in the order the lab checks them; DCQCN's keys
come after ``dcqcn_profile``, which picks the set they default to).

``env`` takes the NCCL plugin's variables verbatim (:mod:`mrc.labs.schema.nccl_env`): they
become the keys they set, and the ones that do not apply are kept as
``TransportSpec.ignored_env``. Every key says whether it is published (OCP mrc.h / the NCCL
plugin) or mrc-lab's own model.

A table is checked in two passes, as the configs themselves would check it: first every
key and value type in file order, then the ranges and rules in table order, which for the
knobs is the config's field order, the order the config checks them in (so a table with
several problems reports the one the config would). RC's ``cc`` and ``ack_every`` come
before its window, whose default is derived from them. A bad value is refused on its own
dotted key before any config is built; building the configs last
(:mod:`mrc.stack.transport_params`) keeps their ``__post_init__`` checks as invariants.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from mrc.ev import DEFAULT_FIELD_WIDTHS, EV_MAX_INSTANCES
from mrc.knobs import knob_problem, knobs
from mrc.labs.errors import LabError
from mrc.labs.schema import nccl_env
from mrc.labs.schema.checks import NAME_RE, check_str, check_table, one_line
from mrc.labs.schema.fields import (
    Derived,
    Field,
    Range,
    Rule,
    Values,
    check_ranges,
    check_types,
    field_map,
    type_word,
)
from mrc.labs.schema.lab import TRANSPORT_KINDS, TransportSpec
from mrc.stack import transport_params as tparams
from mrc.transport.mrc.config import CcConfig, MrcConfig
from mrc.transport.rc.config import RcConfig
from mrc.transport.rc.dcqcn import DCQCN_PROFILES, DEFAULT_DCQCN_PROFILE, DcqcnConfig
from mrc.units import PS_PER_US
from topology.spec import FabricSpec

_UNITS = {"_us": "us", "_bytes": "bytes", "_pkts": "packets", "_gbps": "Gb/s"}
#: Upper bounds (issue 16: every number has one, or a reason why it needs none). Times: a
#: timer of more than 1,000 s is longer than any run (run.duration_us has the same bound).
MAX_TIME_US = 1e9
#: A NIC rate cc can size a window for: 256 planes of the fastest link (topology.spec).
MAX_CC_LINE_RATE_GBPS = 256 * 100_000.0
MAX_PI_GAIN = 1e6  # far beyond any useful gain; 1e300 overflows the window arithmetic
MAX_QPS_PER_PLANE = 256  # NCCL uses a handful; QPNs of a run stay far inside 24 bits
#: What a number without a stated maximum says: the code runs with any value (the slow
#: test in tests/test_lab_bounds.py runs every such key at 2**62 and 1e300).
ANY_VALUE = "none needed: any value runs"


def _field(config: type, name: str, doc: str, *, range: Range | None = None,
           default: Any = None, report_on_table: bool = False,
           unit: str | None = None, maximum: float | None = None,
           limit: str | None = None) -> Field:
    """The lab key of config field ``name``: its type and default read from the config, its
    unit from its name; a ``*_ps`` field is written in microseconds as ``*_us`` (a time,
    so never negative), and a time is at most :data:`MAX_TIME_US`."""
    spec = {f.name: f for f in dataclasses.fields(config)}[name]
    hint = typing.get_type_hints(config)[name]
    if default is None:  # the config's own default; None there means "derived"
        if spec.default is None:
            raise TypeError(f"{config.__name__}.{name}: say how its None default is derived")
        default = spec.default
        if name.endswith("_ps"):
            default = default / PS_PER_US
    if name.endswith("_ps"):
        return Field(name[:-3] + "_us", "number", doc, default=default, unit="us", minimum=0,
                     maximum=MAX_TIME_US, range=range, config_name=name, scale=PS_PER_US)
    if unit is None:
        unit = next((u for suffix, u in _UNITS.items() if name.endswith(suffix)), None)
    word = type_word(hint)
    if maximum is None and name.endswith("_us"):
        maximum = MAX_TIME_US
    bounded = maximum is not None or (range is not None and (
        range.maximum is not None or range.lt is not None or range.choices is not None))
    return Field(name, word, doc, default=default, unit=unit, range=range,
                 report_on_table=report_on_table, maximum=maximum,
                 limit=limit or (None if bounded or word not in ("integer", "number")
                                 else ANY_VALUE))


def _knob(config: type, name: str, **lab: Any) -> Field:
    """The lab key of a config knob (:mod:`mrc.knobs`): its documentation, unit, range (in
    the config's words) and what a None default stands for, all from the knob; ``lab``:
    what the lab adds (a default the fabric derives)."""
    k = knobs(config)[name]
    rng = None
    if k.bounded:
        rng = Range(knob_problem(config, name), minimum=k.minimum, maximum=k.maximum, gt=k.gt,
                    lt=k.lt, choices=k.choices)
    if "default" not in lab and k.none is not None:
        lab["default"] = Derived(k.none)
    return _field(config, name, k.doc, range=rng, unit=k.unit, **lab)


def _knob_table(config: type, *, first: tuple[Field | Rule, ...] = (),
                before: Mapping[str, tuple[Field | Rule, ...]] | None = None,
                after: Mapping[str, tuple[Field | Rule, ...]] | None = None,
                last: tuple[Field | Rule, ...] = (),
                lab: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[Field | Rule, ...]:
    """The table of a config's knobs in its field order, which is the order their ranges are
    checked in (the config's own), with the lab's own keys and rules placed ``first``,
    ``before`` or ``after`` a knob, or ``last``; ``lab``: per knob, what the lab adds."""
    before, after, lab = before or {}, after or {}, lab or {}
    names = knobs(config)
    stray = (set(before) | set(after) | set(lab)) - set(names)
    if stray:
        raise TypeError(f"{config.__name__}: not knobs: {sorted(stray)}")
    out = list(first)
    for name in names:
        out += before.get(name, ())
        out.append(_knob(config, name, **lab.get(name, {})))
        out += after.get(name, ())
    return (*out, *last)


#: DCQCN's knobs in the [transport.NAME] table of an RC transport (cc = "dcqcn"): the
#: profile they start from, then DcqcnConfig's knobs (type, unit, range and wording from the
#: config), each defaulting to the profile's value.
DCQCN_FIELDS: tuple[Field, ...] = (
    Field("dcqcn_profile", "string", "the DCQCN parameter set the other DCQCN keys start "
          "from: nvidia (ConnectX firmware defaults) or paper (Zhu et al. SIGCOMM 2015)",
          default=DEFAULT_DCQCN_PROFILE, choices=tuple(DCQCN_PROFILES)),
    *(_knob(DcqcnConfig, name, default=Derived(
        f"the profile's (nvidia: {getattr(DCQCN_PROFILES['nvidia'], name)!r}, paper: "
        f"{getattr(DCQCN_PROFILES['paper'], name)!r})")) for name in knobs(DcqcnConfig)),
)


# ---------------------------------------------------------------------- MRC's cc table
#: CcConfig's knobs, in the order the lab checks their ranges, with what only a lab adds:
#: the defaults the fabric derives, the bounds of values that run but mean nothing, the rule
#: on two keys.
CC_FIELDS: tuple[Field | Rule, ...] = (
    _knob(CcConfig, "algorithm", report_on_table=True),
    _knob(CcConfig, "line_rate_gbps", maximum=MAX_CC_LINE_RATE_GBPS,
          default=Derived("the fabric's NIC rate (planes x link_gbps)")),
    _knob(CcConfig, "base_rtt", default=Derived("the fabric's base RTT")),
    Rule(("line_rate_gbps", "base_rtt"), "line rate and base RTT are positive",
         lambda v, spec: v["line_rate_gbps"] > 0 and v["base_rtt"] > 0,
         lambda v, spec: "line_rate_gbps and base_rtt must be positive"),
    *(_knob(CcConfig, name) for name in (
        "min_window_bytes", "gamma", "max_md_jump", "loss_md_factor", "target_delay",
        "qa_threshold", "qa_gate", "disable_qa", "max_cwnd", "fi", "fi_scale", "eta",
        "adjust_bytes_threshold", "adjust_period_threshold", "init_rate_mbps",
        "min_rate_mbps", "max_rate_mbps", "init_window_bytes", "fixed_window_bytes")),
    _knob(CcConfig, "pi_gain", maximum=MAX_PI_GAIN),
    _knob(CcConfig, "learn_base_rtt"),
)

# ---------------------------------------------------------------------- [transport.mrc]
EV_PROFILE_FIELDS: tuple[Field | Rule, ...] = (
    Field("mode", "string", "generated (the NIC enumerates the field ranges) or explicit (a "
          "list of EVs)", default="generated", choices=("generated", "explicit")),
    Field("field_widths", "array", "EV field widths in bits, field 0 (the plane) lowest, "
          "then the T1", default=list(DEFAULT_FIELD_WIDTHS)),
    Field("min_vals", "array", "generated mode: each field's smallest value",
          default=Derived("0 for every field")),
    Field("max_vals", "array", "generated mode: each field's largest value",
          default=Derived("planes - 1, T1 per plane - 1, then as many as the EVs need")),
    Field("masks", "array", "generated mode: which bits of each field are generated (the "
          "rest keep 0)", default=Derived("every bit of the field")),
    Field("evs", "array", "explicit mode: the EV values (their count is the QP's EVs)",
          default=Derived("none: generated mode")),
    Field("event_mask", "array", "which new EV states raise EV events (GOOD, ASSUMED_BAD)",
          default=["GOOD", "ASSUMED_BAD"]),
)

#: MrcConfig's knobs (their keys, documentation and ranges are the config's: mrc.knobs), and
#: what only a lab has: the nested tables, the NCCL variables, the connection's QPs and the
#: rules on several keys or on the fabric.
MRC_FIELDS: tuple[Field | Rule, ...] = _knob_table(MrcConfig, first=(
    Rule(("ev_count",), "EVs that can be told apart: 4096 entropy values per path",
         lambda v, spec: v["ev_count"] <= EV_MAX_INSTANCES * spec.planes * spec.t1,
         lambda v, spec: f"{v['ev_count']} EVs cannot be told apart on {spec.planes} "
                         f"plane(s) x {spec.t1} T1(s): at most "
                         f"{EV_MAX_INSTANCES * spec.planes * spec.t1} (4096 per path)"),
    Field("cc", "table", "congestion control: the uet-1.0-nscc profile (the keys of "
          "[transport.NAME.cc])", default={}, fields=CC_FIELDS),
    Field("ev_profile", "table", "the EV profile (the keys of [transport.NAME.ev_profile])",
          default=Derived("generated: ev_count EVs spread over planes and T1s"),
          fields=EV_PROFILE_FIELDS),
    Field("env", "table", "NCCL plugin variables verbatim (NCCL_MRC_*, NCCL_IB_*; see "
          "docs/nccl-env.md)", default={}),
), after={
    "ev_min_active": (
        Rule(("ev_min_active", "ev_count"), "the EV floor is not above the EV count",
             lambda v, spec: v["ev_min_active"] is None or v["ev_min_active"] <= v["ev_count"],
             lambda v, spec: f"ev_min_active must be in 0..ev_count ({v['ev_count']})"),
        Field("qps_per_connection", "integer", "QPs per connection "
              "(NCCL_IB_QPS_PER_CONNECTION)", default=1,
              range=Range("expected an integer >= 1, got {value!r}", minimum=1),
              maximum=MAX_QPS_PER_PLANE),
        Field("split_data_on_qps", "boolean", "split each message over the connection's QPs "
              "(NCCL_IB_SPLIT_DATA_ON_QPS=1) or send it whole on the next one", default=True),
    ),
    "reorder_spread_gain": (
        Rule(("reorder_margin_rtts", "reorder_spread_gain"),
             "the reorder gains are not negative",
             lambda v, spec: v["reorder_spread_gain"] >= 0 and v["reorder_margin_rtts"] >= 0,
             lambda v, spec: "reorder_margin_rtts and reorder_spread_gain must not be "
                             "negative"),
    ),
})

# ---------------------------------------------------------------------- [transport.rc]
#: RcConfig's knobs (as MRC's), after what only a lab has, and DCQCN's knobs flat at the end.
RC_FIELDS: tuple[Field | Rule, ...] = _knob_table(RcConfig, first=(
    Field("qps_per_plane", "integer", "QPs per plane of one connection (NCCL_IB_QPS_PER_"
          "CONNECTION: NCCL drives each NIC port as a device)", default=1, maximum=MAX_QPS_PER_PLANE,
          range=Range("expected an integer >= 1, got {value!r}", minimum=1)),
    Field("split_data_on_qps", "boolean", "stripe each message over every QP "
          "(NCCL_IB_SPLIT_DATA_ON_QPS=1) or over the next QP of each plane", default=True),
    Field("env", "table", "NCCL plugin variables verbatim (NCCL_IB_*; see docs/nccl-env.md)",
          default={}),
    Field("pfc", "boolean", "DATA on the fabric's lossless priority (PFC); false: best "
          "effort, where buffer overflow loses it", default=Derived("the fabric's pfc")),
    Rule(("pfc",), "a lossless RC needs a fabric with PFC",
         lambda v, spec: not v["pfc"] or spec.pfc,
         lambda v, spec: "the fabric has no lossless class (fabric.pfc = false); turn PFC on "
                         "in [fabric] or run RC lossy (pfc = false)"),
), before={
    # after cc and ack_every, which RC's default window is derived from (their ranges first)
    "window_pkts": (
        Rule(("min_window_pkts", "window_pkts"), "the smallest window fits in the window",
             lambda v, spec: 1 <= v["min_window_pkts"] <= v["window_pkts"],
             lambda v, spec: "RcConfig: need 1 <= min_window_pkts <= window_pkts"),
    ),
}, lab={
    "window_pkts": {"default": Derived("cc = window: one bandwidth-delay product + ack_every "
                                       "+ 2; cc = dcqcn: 1024 (a cap; the rate limits)")},
}, last=DCQCN_FIELDS)

#: kind -> its table, in the order its ranges and rules are checked.
FIELDS: dict[str, tuple[Field | Rule, ...]] = {"mrc": MRC_FIELDS, "rc": RC_FIELDS}


def _config_defaults(config: type, fields: tuple[Field | Rule, ...]) -> dict[str, Any]:
    """Lab key -> the config's default value, in the config's units."""
    by_name = {f.name: f for f in dataclasses.fields(config)}
    out: dict[str, Any] = {}
    for f in field_map(fields).values():
        spec = by_name.get(f.config_name or f.key)
        if spec is not None and spec.default is not dataclasses.MISSING:
            out[f.key] = spec.default
    return out


_DEFAULTS = {"mrc": _config_defaults(MrcConfig, MRC_FIELDS),
             "cc": _config_defaults(CcConfig, CC_FIELDS),
             "rc": {**_config_defaults(RcConfig, RC_FIELDS),
                    **_config_defaults(DcqcnConfig, DCQCN_FIELDS)}}


def transports(table: Any, spec: FabricSpec) -> dict[str, TransportSpec]:
    """Every ``[transport.NAME]`` table, checked (default: mrc and rc, with defaults)."""
    if table is None:
        return {k: TransportSpec(k, k, {}) for k in TRANSPORT_KINDS}
    table = check_table(table, "transport")
    if not table:
        raise LabError("no transports: add a [transport.mrc] and/or [transport.rc] table",
                       "transport")
    return {tname: check_transport(tname, body, spec) for tname, body in table.items()}


def check_transport(tname: str, body: Any, spec: FabricSpec) -> TransportSpec:
    """One ``[transport.NAME]`` table: its kind, then its keys (see the module docstring)."""
    prefix = f"transport.{tname}"
    if not NAME_RE.fullmatch(tname):
        raise LabError("a transport name is letters, digits, '-' or '_'", prefix)
    body = check_table(body, prefix)
    if "kind" in body:
        kind = check_str(body["kind"], f"{prefix}.kind", TRANSPORT_KINDS)
        if tname in TRANSPORT_KINDS and kind != tname:
            raise LabError(f"{kind!r} contradicts the table name {tname!r}", f"{prefix}.kind")
    elif tname in TRANSPORT_KINDS:
        kind = tname
    else:
        raise LabError(f"missing required key (kind = \"mrc\" or \"rc\"; {tname!r} is not a kind)",
                       f"{prefix}.kind")
    table = FIELDS[kind]
    checked = check_types(table, {k: v for k, v in body.items() if k != "kind"}, prefix)
    env = nccl_env.translate(checked.pop("env", {}), kind, f"{prefix}.env", spec.planes)
    for key, value in env.keys.items():
        top, _, sub = key.partition(".")
        if (sub and sub in checked.get(top, {})) or (not sub and key in checked):
            raise LabError(f"set twice: by {key} and by env (give one)", f"{prefix}.{key}")
        if sub:
            checked.setdefault(top, {})[sub] = value
        else:
            checked[key] = value
    defaults: dict[str, Any] = dict(_DEFAULTS[kind])
    if kind == "rc":
        defaults["window_pkts"] = lambda: _rc_window(spec, checked, prefix)
        defaults["pfc"] = spec.pfc
    check_ranges(table, checked, prefix, _values(table, checked, defaults), spec,
                 sub_values=lambda f, sub: _values(f.fields or (), sub, _DEFAULTS["cc"]))
    _build(kind, spec, checked, prefix)
    return TransportSpec(tname, kind, checked, ignored_env=env.ignored)


def _values(table: tuple[Field | Rule, ...], given: Mapping[str, Any],
            defaults: Mapping[str, Any]) -> Values:
    fields = field_map(table)
    return Values({k: fields[k].config_value(v) for k, v in given.items()
                   if fields[k].fields is None}, defaults)


def _rc_window(spec: FabricSpec, checked: Mapping[str, Any], prefix: str) -> int:
    """RC's default window, as the transport derives it from the fabric (ack_every, cc)."""
    given = {k: checked[k] for k in ("ack_every", "cc") if k in checked}
    return _build("rc", spec, given, prefix)[0].window_pkts  # type: ignore[no-any-return]


def _build(kind: str, spec: FabricSpec, params: dict[str, Any], prefix: str) -> Any:
    """The transport's config for these checked params: its own checks run as invariants.
    A :class:`~mrc.stack.transport_params.ParamError` names its key path itself (we pass ours)."""
    try:
        if kind == "mrc":
            return tparams.mrc_config(spec, params, prefix)
        return tparams.rc_config(spec, params, prefix)
    except tparams.ParamError as exc:
        raise LabError(one_line(exc)) from None
    except (ValueError, TypeError) as exc:
        raise LabError(one_line(exc), prefix) from None
