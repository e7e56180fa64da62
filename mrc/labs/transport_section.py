"""``[transport.NAME]``: one table per transport compared, its keys the transport's config.

``NAME`` is unique; ``kind = "mrc"`` or ``"rc"`` unless NAME is itself a kind. The keys are
the fields of the transport's config (``MrcConfig`` with its nested ``cc`` table, or
``RcConfig``; types and defaults read from the configs, so they cannot drift), with
microseconds where the config stores picoseconds (``probe_interval_us`` sets
``probe_interval_ps``) and the fabric filling in what it knows (MTU, line rate, base RTT,
RC's window).

A table is checked in two passes, as the configs themselves would check it: first every
key and value type in file order, then the ranges and rules in table order, which is the
configs' own order (so a table with several problems reports the one the config would),
except that RC's ``ack_every`` comes before the window rules: RC's default window is derived
from it. The ranges are the configs' range checks restated here with their wording, so a
bad value is refused on its own dotted key before any config is built; building the
configs last (:mod:`mrc.sim.transport_params`) keeps their ``__post_init__`` checks as
invariants.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from mrc.ev import EV_MAX_INSTANCES
from mrc.labs.checks import NAME_RE, check_str, check_table, one_line
from mrc.labs.errors import LabError
from mrc.labs.fields import (
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
from mrc.labs.model import TRANSPORT_KINDS, TransportSpec
from mrc.packet import PSN_MASK, PSN_MOD
from mrc.sim import transport_params as tparams
from mrc.transport.mrc.cc import ALGORITHMS, CcConfig
from mrc.transport.mrc.config import SPRAY_POLICIES, MrcConfig
from mrc.transport.rc.config import RcConfig
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
           maximum: float | None = None, limit: str | None = None) -> Field:
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


def _mrc(name: str, doc: str, **kwargs: Any) -> Field:
    return _field(MrcConfig, name, doc, **kwargs)


def _cc(name: str, doc: str, **kwargs: Any) -> Field:
    return _field(CcConfig, name, doc, **kwargs)


def _at_least_one(name: str) -> Range:
    return Range(f"{name} must be >= 1", minimum=1)


def _positive(name: str, *, show: bool = False) -> Range:
    return Range(f"{name} must be positive" + (", got {value!r}" if show else ""), gt=0)


def _rc(name: str, doc: str, problem: str, **bounds: Any) -> Field:
    """An RcConfig key with a range; ``problem`` is RcConfig's own wording of it."""
    return _field(RcConfig, name, doc, range=Range(f"RcConfig: {problem}", **bounds))


# ---------------------------------------------------------------------- MRC's cc table
CC_FIELDS: tuple[Field | Rule, ...] = (
    _cc("algorithm", "congestion control: nscc (delay-based) or fixed (a constant "
           "window)", range=Range(f"unknown cc algorithm {{value!r}}; known: {ALGORITHMS}",
                                  choices=ALGORITHMS), report_on_table=True),
    _cc("line_rate_gbps", "NIC rate the window is sized for",
           default=Derived("the fabric's NIC rate (planes x link_gbps)"),
           maximum=MAX_CC_LINE_RATE_GBPS),
    _cc("base_rtt_ps", "unloaded round trip the window is sized for",
           default=Derived("the fabric's base RTT")),
    Rule(("line_rate_gbps", "base_rtt_us"), "line rate and base RTT are positive",
         lambda v, spec: v["line_rate_gbps"] > 0 and v["base_rtt_us"] > 0,
         lambda v, spec: "line_rate_gbps and base_rtt_ps must be positive"),
    _cc("min_window_bytes", "smallest window",
           range=_positive("min_window_bytes")),
    _cc("md_gain", "multiplicative decrease = md_gain x (delay - target) / delay, "
           "capped at 1/2", range=Range("md_gain must be in (0, 1]", gt=0, maximum=1)),
    _cc("loss_md_factor", "window x this on a silent loss (1.0: loss is not "
           "congestion)", range=Range("loss_md_factor must be in [0.5, 1] (never below half)",
                                      minimum=0.5, maximum=1)),
    _cc("target_qdelay_ps", "queueing delay nscc aims for",
           range=_positive("target_qdelay_ps", show=True),
           default=Derived("3/4 of the base RTT")),
    _cc("init_window_bytes", "initial window",
           range=_positive("init_window_bytes", show=True),
           default=Derived("one bandwidth-delay product")),
    _cc("max_window_bytes", "largest window",
           range=_positive("max_window_bytes", show=True),
           default=Derived("1.5 bandwidth-delay products")),
    _cc("fixed_window_bytes", "the window of algorithm = \"fixed\"",
           range=_positive("fixed_window_bytes", show=True),
           default=Derived("one bandwidth-delay product")),
    _cc("pi_gain", "proportional increase per acked byte at zero queueing delay",
           maximum=MAX_PI_GAIN),
    _cc("fi_bytes", "fair (additive) increase per RTT when the delay is high"),
    _cc("quick_adapt", "after a trim, set the window to what the last interval "
           "delivered"),
    _cc("qa_delay_factor", "delay above this x target also arms quick adapt"),
    _cc("learn_base_rtt", "lower the base RTT to the smallest sample seen"),
)

# ---------------------------------------------------------------------- [transport.mrc]
MRC_FIELDS: tuple[Field | Rule, ...] = (
    Rule(("ev_count",), "EVs that can be told apart: 256 instances per path, at least one "
         "path per plane",
         lambda v, spec: v["ev_count"] <= EV_MAX_INSTANCES * spec.planes,
         lambda v, spec: f"{v['ev_count']} EVs cannot be told apart on {spec.planes} "
                         f"plane(s): at most {EV_MAX_INSTANCES * spec.planes} (256 per path)"),
    Field("cc", "table", "congestion control (the keys of [transport.NAME.cc])", default={},
          fields=CC_FIELDS),
    _mrc("spray", "how packets pick an EV: round_robin or reps (recycle EVs that "
           "delivered)", range=Range(f"unknown spray policy {{value!r}}; known: "
                                     f"{SPRAY_POLICIES}", choices=SPRAY_POLICIES)),
    _mrc("rto_exp", "retransmission timeout = max(rto_floor_us, 1.024 us x 2^rto_exp)",
           range=Range("rto_exp must be in 0..24, got {value}", minimum=0, maximum=24)),
    _mrc("retry_cnt_exp", "a QP with no live path errors after 2^(n+1) - 1 timeouts; "
           "25 or more: never", range=Range("retry_cnt_exp must be >= 0 or None", minimum=0)),
    _mrc("ev_count", "EVs (paths) per QP", range=_at_least_one("ev_count"),
         limit="256 per plane of the fabric (the rule below)"),
    _mrc("reps_explore_every", "REPS: every n-th packet of a plane explores (round "
           "robin)", range=_at_least_one("reps_explore_every")),
    _mrc("ack_every", "one ACK per this many new packets",
           range=_at_least_one("ack_every")),
    _mrc("probes_to_reintegrate", "answered probes in a row that bring a bad EV back",
           range=_at_least_one("probes_to_reintegrate")),
    _mrc("reorder_hold_rtts", "the RTT spread is the largest over about this many RTTs",
           range=_at_least_one("reorder_hold_rtts")),
    _mrc("overdue_strikes", "overdue losses with no delivery between that make an EV "
           "bad", range=_at_least_one("overdue_strikes")),
    _mrc("ack_delay_ps", "delayed ACK for a message's tail",
           range=_positive("ack_delay_ps")),
    _mrc("probe_interval_ps", "probes of a bad EV are this far apart",
           range=_positive("probe_interval_ps")),
    _mrc("rto_floor_ps", "smallest retransmission timeout",
           range=_positive("rto_floor_ps")),
    _mrc("loss_grace_ps", "a suspected loss waits this long for a trim NACK",
           range=Range("loss_grace_ps must not be negative", minimum=0)),
    _mrc("probe_timeout_ps", "a probe unanswered this long breaks the run of answers",
           range=_positive("probe_timeout_ps"), default=Derived("the RTO")),
    _mrc("reorder_window_ps", "how long a gap may be reordering before it is loss",
           range=_positive("reorder_window_ps"),
           default=Derived("adaptive: margin x min RTT + gain x RTT spread, at most the RTO")),
    _mrc("reorder_margin_rtts", "adaptive reorder window: min RTTs of margin"),
    _mrc("reorder_spread_gain", "adaptive reorder window: weight of the RTT spread"),
    Rule(("reorder_margin_rtts", "reorder_spread_gain"), "the reorder gains are not negative",
         lambda v, spec: v["reorder_spread_gain"] >= 0 and v["reorder_margin_rtts"] >= 0,
         lambda v, spec: "reorder_margin_rtts and reorder_spread_gain must not be negative"),
    _mrc("overdue_loss", "time-based loss evidence from packets sent later on other EVs"),
    _mrc("ack_req_on_last", "ask for an immediate ACK on a message's last packet"),
    _mrc("sender_completions", "raise a send completion when a send is fully acked"),
)

# ---------------------------------------------------------------------- [transport.rc]
RC_FIELDS: tuple[Field | Rule, ...] = (
    Field("qps_per_plane", "integer", "QPs per plane of one connection (NCCL_IB_QPS_PER_"
          "CONNECTION spread over the planes)", default=1, maximum=MAX_QPS_PER_PLANE,
          range=Range("expected an integer >= 1, got {value!r}", minimum=1)),
    _rc("ack_every", "responder ACK coalescing: one ACK per this many packets",
        "ack_every must be at least 1", minimum=1),
    Rule(("min_window_pkts", "window_pkts"), "the smallest window fits in the window",
         lambda v, spec: 1 <= v["min_window_pkts"] <= v["window_pkts"],
         lambda v, spec: "RcConfig: need 1 <= min_window_pkts <= window_pkts"),
    _field(RcConfig, "window_pkts", "packets in flight at most",
           range=Range("RcConfig: window_pkts must stay far below 2^24 PSNs", lt=PSN_MOD // 4),
           default=Derived("one bandwidth-delay product + ack_every + 2")),
    _rc("timeout_exp", "local ACK timeout 4.096 us x 2^n (NCCL_IB_TIMEOUT); 0: never",
        "timeout_exp is a 5-bit verbs field (0..31)", minimum=0, maximum=31),
    _rc("retry_cnt", "timeouts before the QP errors (NCCL_IB_RETRY_CNT)",
        "retry_cnt is a 3-bit verbs field (0..7)", minimum=0, maximum=7),
    _field(RcConfig, "reroute_after_us", "dynamic-routing model: move a stalled QP to "
           "another path after this long",
           range=Range("RcConfig: reroute_after_us must be positive or None", gt=0),
           default=Derived("never: static SRv6 routing")),
    _rc("ecn_decrease", "window multiplier on an ECN echo", "ecn_decrease must be in (0, 1]",
        gt=0, maximum=1),
    _rc("additive_increase_pkts", "window growth per window acknowledged",
        "additive_increase_pkts must not be negative", minimum=0),
    _rc("cnp_interval_us", "least time between immediate CE-triggered ACKs",
        "cnp_interval_us must not be negative", minimum=0),
    _rc("initial_psn", "first packet sequence number", "initial_psn must be a 24-bit PSN",
        minimum=0, maximum=PSN_MASK),
    _field(RcConfig, "min_window_pkts", "smallest window"),
    _field(RcConfig, "key_seed", "seed of the verifiable-payload keys"),
)

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
             "rc": _config_defaults(RcConfig, RC_FIELDS)}


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
    defaults: dict[str, Any] = dict(_DEFAULTS[kind])
    if kind == "rc":
        defaults["window_pkts"] = lambda: _rc_window(spec, checked, prefix)
    check_ranges(table, checked, prefix, _values(table, checked, defaults), spec,
                 sub_values=lambda f, sub: _values(f.fields or (), sub, _DEFAULTS["cc"]))
    _build(kind, spec, checked, prefix)
    return TransportSpec(tname, kind, checked)


def _values(table: tuple[Field | Rule, ...], given: Mapping[str, Any],
            defaults: Mapping[str, Any]) -> Values:
    fields = field_map(table)
    return Values({k: fields[k].config_value(v) for k, v in given.items()
                   if fields[k].fields is None}, defaults)


def _rc_window(spec: FabricSpec, checked: Mapping[str, Any], prefix: str) -> int:
    """RC's default window, as the transport derives it from the fabric (and ack_every)."""
    given = {"ack_every": checked["ack_every"]} if "ack_every" in checked else {}
    return _build("rc", spec, given, prefix)[0].window_pkts  # type: ignore[no-any-return]


def _build(kind: str, spec: FabricSpec, params: dict[str, Any], prefix: str) -> Any:
    """The transport's config for these checked params: its own checks run as invariants.
    A :class:`~mrc.sim.transport_params.ParamError` names its key path itself (we pass ours)."""
    try:
        if kind == "mrc":
            return tparams.mrc_config(spec, params, prefix)
        return tparams.rc_config(spec, params, prefix)
    except tparams.ParamError as exc:
        raise LabError(one_line(exc)) from None
    except (ValueError, TypeError) as exc:
        raise LabError(one_line(exc), prefix) from None
