"""Lab parameters -> transport configs: the one place that knows which keys a
``[transport.NAME]`` table accepts and how their units map onto the configs. It lives with
the simulator, not the transport, because some defaults come from the fabric.

Lab files speak microseconds (``probe_interval_us``); configs store integer picoseconds
(``probe_interval_ps``). Every ``*_ps`` field of a config is accepted as ``*_us``. MRC's
congestion-control knobs live in a nested ``cc`` table (``transport.mrc.cc.algorithm``);
its line rate and base RTT default to the fabric's, so the window matches the BDP. MRC's EV
profile is the nested ``ev_profile`` table (:func:`ev_profile`). Keys that configure the
connection rather than each QP (QPs per connection, how data is split over them) are
returned apart (:func:`mrc_connection`, :func:`rc_config`).

A lab's ``run.time_scale`` reaches these builders as the ``time_scale`` entry of the
transport's parameters (:data:`TIME_SCALE_KEY`, put there by the labs layer when the factor
is not 1) and is applied here, once, to the config built: :func:`mrc.knobs.scale_timers`
multiplies exactly the fields declared real-world timers (``knob(..., real_timer=True)``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mrc.ev import DEFAULT_FIELD_WIDTHS, EV_STATE_CODES
from mrc.ev.profile import EV_MODES, EXPLICIT, GENERATED, EvField, EvProfile, EvProfileError
from mrc.knobs import TIME_SCALE, scale_timers
from mrc.stack.rc_connection import rc_config_for
from mrc.transport.mrc.config import CcConfig, MrcConfig
from mrc.transport.rc.config import RcConfig
from mrc.transport.rc.dcqcn import DEFAULT_DCQCN_PROFILE, DcqcnConfig, dcqcn_profile
from mrc.units import PS_PER_US
from topology import evs as fabric_evs
from topology.spec import FabricSpec

#: RC keys that configure the connection rather than each QP, or its place in the fabric:
#: ``pfc`` puts its DATA on the fabric's lossless priority (default: when the fabric has PFC).
RC_CONNECTION_KEYS = ("qps_per_plane", "split_data_on_qps", "pfc")
#: MRC keys that configure the connection rather than each QP.
MRC_CONNECTION_KEYS = ("qps_per_connection", "split_data_on_qps")
#: MRC's nested tables (besides ``cc``): checked by their own functions.
MRC_TABLES = ("ev_profile",)
#: Keys of ``[transport.NAME.ev_profile]``.
EV_PROFILE_KEYS = ("mode", "field_widths", "min_vals", "max_vals", "masks", "evs",
                   "event_mask")
#: The parameter that carries a lab's ``run.time_scale`` (not a key of the transport table).
TIME_SCALE_KEY = TIME_SCALE
#: Keys the driver fills from the fabric (or the run: the time scale); a lab may not set them.
_FROM_FABRIC = {"mtu", "mtu_bytes", TIME_SCALE}
#: ...and RC's: its port's rate and framing (DCQCN's pacing), its priority (from ``pfc``)
_RC_FROM_FABRIC = {"line_rate_gbps", "frame_overhead_bytes", "priority"}


class ParamError(ValueError):
    """A transport parameter that does not exist or does not fit; names the dotted key."""


def _accepted(cls: type) -> dict[str, str]:
    """Lab key -> config field for a config dataclass."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in _FROM_FABRIC or f.name == "dcqcn":
            continue
        if cls is RcConfig and f.name in _RC_FROM_FABRIC:
            continue
        if cls is not RcConfig and f.name == "cc":  # MRC's cc is a table of its own
            continue
        key = f.name[:-3] + "_us" if f.name.endswith("_ps") else f.name
        out[key] = f.name
    return out


MRC_KEYS = {**_accepted(MrcConfig), **{k: k for k in MRC_CONNECTION_KEYS}}
CC_KEYS = _accepted(CcConfig)
#: DCQCN's knobs sit flat in the RC table under NVIDIA's names (``rpg_ai_rate``...), after
#: ``dcqcn_profile``, the named set they start from (mrc.transport.rc.dcqcn)
DCQCN_KEYS = {"dcqcn_profile": "dcqcn_profile",
              **{f.name: f.name for f in dataclasses.fields(DcqcnConfig)}}
RC_KEYS = {**_accepted(RcConfig), **{k: k for k in RC_CONNECTION_KEYS}, **DCQCN_KEYS}


def accepted_keys(kind: str) -> list[str]:
    """Every key a ``[transport.NAME]`` table of this kind accepts (``cc.*`` for MRC's cc)."""
    if kind == "mrc":
        return (sorted(MRC_KEYS) + ["cc." + k for k in sorted(CC_KEYS)]
                + ["ev_profile." + k for k in EV_PROFILE_KEYS])
    if kind == "rc":
        return sorted(RC_KEYS)
    raise ParamError(f"unknown transport kind {kind!r}; known: mrc, rc")


def _convert(params: dict[str, Any], accepted: dict[str, str], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        field = accepted.get(key)
        if field is None:
            raise ParamError(f"{where}.{key}: unknown key; known: {', '.join(sorted(accepted))}")
        if field.endswith("_ps") and value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ParamError(f"{where}.{key}: expected a number, got {value!r}")
            value = int(round(value * PS_PER_US))
        out[field] = value
    return out


def _time_scale(params: dict[str, Any], where: str) -> float:
    """Pop the run's time scale from ``params`` (1 when absent)."""
    factor = params.pop(TIME_SCALE_KEY, 1.0)
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
        raise ParamError(f"{where}.{TIME_SCALE_KEY}: expected a number in (0, 1], "
                         f"got {factor!r}")
    return float(factor)


def _count(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParamError(f"{key}: expected an integer >= 1, got {value!r}")
    return value


def _flag(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ParamError(f"{key}: expected true/false (or 0/1), got {value!r}")


def mrc_config(spec: FabricSpec, params: dict[str, Any], where: str = "transport.mrc"
               ) -> MrcConfig:
    """An MrcConfig for this fabric from a lab's transport table."""
    return mrc_connection(spec, params, where).config


@dataclass(frozen=True)
class MrcConnectionParams:
    """What one MRC connection is built from: the QPs' config, how many QPs, whether each
    message is split over them (NCCL_IB_SPLIT_DATA_ON_QPS), and the EV profile."""

    config: MrcConfig
    qps: int
    split: bool
    profile: EvProfile


def mrc_connection(spec: FabricSpec, params: dict[str, Any], where: str = "transport.mrc"
                   ) -> MrcConnectionParams:
    """Config, connection keys and EV profile of an MRC transport table."""
    params = dict(params)
    params.pop("kind", None)
    factor = _time_scale(params, where)
    cc_params = params.pop("cc", None) or {}
    if not isinstance(cc_params, dict):
        raise ParamError(f"{where}.cc: expected a table")
    profile_params = params.pop("ev_profile", None) or {}
    if not isinstance(profile_params, dict):
        raise ParamError(f"{where}.ev_profile: expected a table")
    cc_fields: dict[str, Any] = {"line_rate_gbps": spec.nic_gbps,
                                 "base_rtt": round(spec.base_rtt_ps() / 1000),
                                 "mtu_bytes": spec.mtu_bytes}
    cc_fields.update(_convert(cc_params, CC_KEYS, where + ".cc"))
    fields = _convert(params, MRC_KEYS, where)
    qps = _count(fields.pop("qps_per_connection", 1), f"{where}.qps_per_connection")
    split = _flag(fields.pop("split_data_on_qps", True), f"{where}.split_data_on_qps")
    try:
        config = scale_timers(MrcConfig(cc=CcConfig(**cc_fields), **fields), factor)
    except (TypeError, ValueError) as exc:
        raise ParamError(f"{where}: {exc}") from None
    profile = ev_profile(spec, config, profile_params, f"{where}.ev_profile")
    return MrcConnectionParams(config, qps, split, profile)


def _ints(value: Any, key: str, n: int | None = None) -> list[int]:
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int)
                                          or v < 0 for v in value):
        raise ParamError(f"{key}: expected an array of integers >= 0, got {value!r}")
    if n is not None and len(value) != n:
        raise ParamError(f"{key}: expected {n} values (one per field), got {len(value)}")
    return value


def ev_profile(spec: FabricSpec, config: MrcConfig, table: dict[str, Any],
               where: str = "transport.mrc.ev_profile") -> EvProfile:
    """The EV profile of an MRC transport: by default the generated profile of ``ev_count``
    EVs on this fabric (the "EVs per QP" shorthand); a table gives fields (widths, minima,
    maxima, masks; field 0 the plane, field 1 the T1) or an explicit EV list."""
    for key in table:
        if key not in EV_PROFILE_KEYS:
            raise ParamError(f"{where}.{key}: unknown key; known: {', '.join(EV_PROFILE_KEYS)}")
    mode = table.get("mode", GENERATED)
    if mode not in EV_MODES:
        raise ParamError(f"{where}.mode: expected one of {', '.join(EV_MODES)}, got {mode!r}")
    mask = 0
    for name in table.get("event_mask", ["GOOD", "ASSUMED_BAD"]):
        if name not in ("GOOD", "ASSUMED_BAD"):
            raise ParamError(f"{where}.event_mask: EV events report GOOD and ASSUMED_BAD only, "
                             f"not {name!r}")
        mask |= EV_STATE_CODES[name]
    count = config.ev_count
    min_active = config.min_active_for(count)
    try:
        if not (set(table) - {"event_mask"}):
            return fabric_evs.fabric_profile(spec, count, min_active=min_active,
                                             event_mask=mask)
        widths = _ints(table.get("field_widths", list(DEFAULT_FIELD_WIDTHS)),
                       f"{where}.field_widths")
        if not widths:
            raise ParamError(f"{where}.field_widths: give at least one field (the plane)")
        n = len(widths)
        if mode == EXPLICIT:
            if "evs" not in table:
                raise ParamError(f"{where}.evs: an explicit profile lists its EVs")
            evs = _ints(table["evs"], f"{where}.evs")
            for key in ("min_vals", "max_vals", "masks"):
                if key in table:
                    raise ParamError(f"{where}.{key}: an explicit profile generates nothing")
            fields = tuple(EvField(w) for w in widths)
            profile = EvProfile(fields, EXPLICIT, ev_count=len(evs),
                                min_active=min(min_active, len(evs)), event_mask=mask,
                                evs=tuple(evs))
        else:
            if "evs" in table:
                raise ParamError(f"{where}.evs: a generated profile takes no EV list")
            mins = _ints(table.get("min_vals", [0] * n), f"{where}.min_vals", n)
            masks = _ints(table["masks"], f"{where}.masks", n) if "masks" in table else None
            default_max = [spec.planes - 1, spec.t1 - 1]
            if "max_vals" in table:
                maxs: list[int | None] = list(_ints(table["max_vals"], f"{where}.max_vals", n))
            else:
                maxs = [default_max[i] if i < 2 else None for i in range(n)]
            fields = tuple(EvField(w, min_val=lo, max_val=hi,
                                   mask=None if masks is None else masks[i])
                           for i, (w, lo, hi) in enumerate(zip(widths, mins, maxs,
                                                               strict=True)))
            profile = EvProfile(fields, GENERATED, ev_count=count, min_active=min_active,
                                event_mask=mask)
        fabric_evs.check_fits(spec, profile)
        return profile
    except (EvProfileError, fabric_evs.EvPathError) as exc:
        raise ParamError(f"{where}: {exc}") from None


def rc_config(spec: FabricSpec, params: dict[str, Any], where: str = "transport.rc"
              ) -> tuple[RcConfig, int]:
    """(RcConfig, qps_per_plane) for this fabric from a lab's transport table."""
    config, per_plane, _ = rc_connection(spec, params, where)
    return config, per_plane


def rc_connection(spec: FabricSpec, params: dict[str, Any], where: str = "transport.rc"
                  ) -> tuple[RcConfig, int, bool]:
    """(RcConfig, qps_per_plane, split_data_on_qps) from a lab's transport table."""
    params = dict(params)
    params.pop("kind", None)
    factor = _time_scale(params, where)
    fields = _convert(params, RC_KEYS, where)
    qps_per_plane = _count(fields.pop("qps_per_plane", 1), f"{where}.qps_per_plane")
    split = _flag(fields.pop("split_data_on_qps", True), f"{where}.split_data_on_qps")
    pfc = fields.pop("pfc", None)
    if pfc is None:
        pfc = spec.pfc
    if not isinstance(pfc, bool):
        raise ParamError(f"{where}.pfc: expected true or false, got {pfc!r}")
    if pfc and not spec.pfc:
        raise ParamError(f"{where}.pfc: the fabric has no lossless class (fabric.pfc = false); "
                         "turn PFC on in [fabric] or run RC lossy (pfc = false)")
    dcqcn = {k: fields.pop(k) for k in list(fields) if k in DCQCN_KEYS}
    profile = dcqcn.pop("dcqcn_profile", DEFAULT_DCQCN_PROFILE)
    try:
        config = rc_config_for(spec, priority=spec.pfc_priority if pfc else 0,
                               dcqcn=dcqcn_profile(profile, **dcqcn), **fields)
        return scale_timers(config, factor), qps_per_plane, split
    except (TypeError, ValueError) as exc:
        raise ParamError(f"{where}: {exc}") from None
