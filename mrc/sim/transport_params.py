"""Lab parameters -> transport configs: the one place that knows which keys a
``[transport.NAME]`` table accepts and how their units map onto the configs. It lives with
the simulator, not the transport, because some defaults come from the fabric.

Lab files speak microseconds (``probe_interval_us``); configs store integer picoseconds
(``probe_interval_ps``). Every ``*_ps`` field of a config is accepted as ``*_us``. MRC's
congestion-control knobs live in a nested ``cc`` table (``transport.mrc.cc.algorithm``);
its line rate and base RTT default to the fabric's, so the window matches the BDP.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mrc.sim.rc_connection import rc_config_for
from mrc.transport.mrc.cc import CcConfig
from mrc.transport.mrc.config import MrcConfig
from mrc.transport.rc.config import RcConfig
from mrc.transport.rc.dcqcn import DcqcnConfig
from mrc.units import PS_PER_US
from topology.spec import FabricSpec

#: RC keys that configure the connection rather than each QP, or its place in the fabric:
#: ``pfc`` puts its DATA on the fabric's lossless priority (default: when the fabric has PFC).
RC_CONNECTION_KEYS = ("qps_per_plane", "pfc")
#: Keys the driver fills from the fabric; a lab may not set them.
_FROM_FABRIC = {"mtu"}
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


MRC_KEYS = _accepted(MrcConfig)
CC_KEYS = _accepted(CcConfig)
#: DCQCN's knobs sit flat in the RC table under NVIDIA's names (``rpg_ai_rate``...)
DCQCN_KEYS = {f.name: f.name for f in dataclasses.fields(DcqcnConfig)}
RC_KEYS = {**_accepted(RcConfig), **{k: k for k in RC_CONNECTION_KEYS}, **DCQCN_KEYS}


def accepted_keys(kind: str) -> list[str]:
    """Every key a ``[transport.NAME]`` table of this kind accepts (``cc.*`` for MRC's cc)."""
    if kind == "mrc":
        return sorted(MRC_KEYS) + ["cc." + k for k in sorted(CC_KEYS)]
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


def mrc_config(spec: FabricSpec, params: dict[str, Any], where: str = "transport.mrc"
               ) -> MrcConfig:
    """An MrcConfig for this fabric from a lab's transport table."""
    params = dict(params)
    params.pop("kind", None)
    cc_params = params.pop("cc", None) or {}
    if not isinstance(cc_params, dict):
        raise ParamError(f"{where}.cc: expected a table")
    cc_fields: dict[str, Any] = {"line_rate_gbps": spec.nic_gbps,
                                 "base_rtt_ps": spec.base_rtt_ps()}
    cc_fields.update(_convert(cc_params, CC_KEYS, where + ".cc"))
    fields = _convert(params, MRC_KEYS, where)
    ev_count = fields.get("ev_count")
    limit = 256 * spec.planes  # every plane has at least one path; 256 instances per path
    if isinstance(ev_count, int) and not isinstance(ev_count, bool) and ev_count > limit:
        raise ParamError(f"{where}.ev_count: {ev_count} EVs cannot be told apart on "
                         f"{spec.planes} plane(s): at most {limit} (256 per path)")
    try:
        return MrcConfig(cc=CcConfig(**cc_fields), **fields)
    except (TypeError, ValueError) as exc:
        raise ParamError(f"{where}: {exc}") from None


def rc_config(spec: FabricSpec, params: dict[str, Any], where: str = "transport.rc"
              ) -> tuple[RcConfig, int]:
    """(RcConfig, qps_per_plane) for this fabric from a lab's transport table."""
    params = dict(params)
    params.pop("kind", None)
    fields = _convert(params, RC_KEYS, where)
    qps_per_plane = fields.pop("qps_per_plane", 1)
    if isinstance(qps_per_plane, bool) or not isinstance(qps_per_plane, int) or qps_per_plane < 1:
        raise ParamError(f"{where}.qps_per_plane: expected an integer >= 1, got {qps_per_plane!r}")
    pfc = fields.pop("pfc", None)
    if pfc is None:
        pfc = spec.pfc
    if not isinstance(pfc, bool):
        raise ParamError(f"{where}.pfc: expected true or false, got {pfc!r}")
    if pfc and not spec.pfc:
        raise ParamError(f"{where}.pfc: the fabric has no lossless class (fabric.pfc = false); "
                         "turn PFC on in [fabric] or run RC lossy (pfc = false)")
    dcqcn = {k: fields.pop(k) for k in list(fields) if k in DCQCN_KEYS}
    try:
        return rc_config_for(spec, priority=spec.pfc_priority if pfc else 0,
                             dcqcn=DcqcnConfig(**dcqcn), **fields), qps_per_plane
    except (TypeError, ValueError) as exc:
        raise ParamError(f"{where}: {exc}") from None
