"""``[fabric]``: a topology preset and/or the numbers of a :class:`~topology.spec.FabricSpec`.

The keys are FabricSpec's own fields (types and defaults read from it, so the two cannot
drift) plus ``preset``; a preset brings its own numbers, and a table that sets nothing is the
``lab-small`` preset. The ranges and the relations between the numbers (hosts a multiple
of hosts_per_t0, a buffer that holds a packet, what the uSID plan can address...) are the
fabric model's: ``FabricSpec`` refuses an impossible fabric with the reason, and that
reason is reported on the ``fabric`` table, since it is usually about several keys at once.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.checks import check_table
from mrc.labs.schema.fields import Derived, Field, check_types, type_word
from topology import usid
from topology.spec import (
    MAX_DELAY_NS,
    MAX_LINK_GBPS,
    MAX_MTU_BYTES,
    MIN_MTU_BYTES,
    PRESETS,
    FabricError,
    FabricSpec,
    preset,
)

DEFAULT_PRESET = "lab-small"

#: key -> (unit, doc): what FabricSpec's fields mean in a lab file.
_DOCS: dict[str, tuple[str | None, str]] = {
    "planes": (None, "planes; every NIC has one port per plane"),
    "hosts": (None, "hosts (NICs) in the fabric"),
    "hosts_per_t0": (None, "hosts under each T0 (leaf) switch"),
    "t1_per_plane": (None, "T1 (spine) switches per plane"),
    "link_gbps": ("Gb/s", "rate of every link"),
    "link_delay_ns": ("ns", "propagation delay of every link"),
    "switch_latency_ns": ("ns", "forwarding latency of every switch"),
    "buffer_bytes": ("bytes", "packet buffer of every switch port"),
    "trimming": (None, "switches trim packets to their headers instead of dropping them"),
    "trim_threshold_bytes": ("bytes", "queue depth at which packets are trimmed"),
    "trim_size_bytes": ("bytes", "size of a trimmed packet"),
    "header_queue_bytes": ("bytes", "priority queue for trimmed headers and control packets"),
    "ecn_threshold_bytes": ("bytes", "queue depth at which packets are ECN-marked"),
    "mtu_bytes": ("bytes", "payload bytes per DATA packet"),
    "switch_radix": (None, "ports per switch; when set, both tiers must fit"),
    "pfc": (None, "PFC (802.1Qbb) on the lossless priority: RC's data is never dropped "
            "for buffer space, ports pause instead (see mrc.sim.pfc)"),
    "pfc_priority": (None, "802.1p priority of the lossless class (0..7)"),
    "pfc_xoff_bytes": ("bytes", "lossless bytes buffered from one ingress port above which "
                       "it is paused (XOFF)"),
    "pfc_xon_bytes": ("bytes", "lossless bytes from one ingress port at or below which it "
                      "is resumed (XON); below pfc_xoff_bytes"),
    "pfc_headroom_bytes": ("bytes", "room above XOFF for what arrives before the pause "
                           "takes effect; at least 2 x link delay + switch latency + 3 MTU "
                           "frames + a PAUSE frame at line rate"),
    "pfc_quanta": (None, "pause time an XOFF asks for, in quanta of 512 bit times "
                   "(refreshed every half of it while still congested)"),
    "pfc_watchdog_us": ("us", "PFC watchdog detection time: a port paused this long drops "
                        "its lossless queue and ignores PAUSE (SONiC); 0 = off"),
    "pfc_watchdog_restore_us": ("us", "the watchdog restores a stormed port after this long "
                                "without PAUSE frames"),
    "lossless_ecn_kmin_bytes": ("bytes", "lossless queue (DCQCN's congestion point): no ECN "
                                "mark below this many bytes queued"),
    "lossless_ecn_kmax_bytes": ("bytes", "lossless queue: marking probability reaches "
                                "lossless_ecn_pmax here; every departing packet is marked "
                                "above"),
    "lossless_ecn_pmax": (None, "lossless queue: marking probability at kmax (RED)"),
}
_UNALLOCATED = "none: compared with queue depths, never allocated"
#: key -> Field bounds: the ones the fabric model (FabricSpec, the uSID plan) enforces, stated
#: here too so that a bad value is reported on its own key and the reference lists them.
_BOUNDS: dict[str, dict[str, Any]] = {
    "planes": {"minimum": 1, "maximum": usid.MAX_PLANES},
    "hosts": {"minimum": 1, "limit": f"hosts / hosts_per_t0 T0s per plane, at most "
                                     f"{usid.MAX_T0} (the uSID plan); the simulator runs at "
                                     "most 16,384 NIC ports (hosts x planes)"},
    "hosts_per_t0": {"minimum": 1, "maximum": usid.MAX_PORTS},
    "t1_per_plane": {"minimum": 1, "maximum": usid.MAX_T1},
    "link_gbps": {"gt": 0, "maximum": MAX_LINK_GBPS},
    "link_delay_ns": {"minimum": 0, "maximum": MAX_DELAY_NS},
    "switch_latency_ns": {"minimum": 0, "maximum": MAX_DELAY_NS},
    "buffer_bytes": {"minimum": 1, "limit": _UNALLOCATED},
    "trim_threshold_bytes": {"minimum": 1, "limit": "at most buffer_bytes"},
    "trim_size_bytes": {"minimum": 1, "limit": "smaller than a full packet (mtu_bytes + 144)"},
    "header_queue_bytes": {"minimum": 1, "limit": _UNALLOCATED},
    "ecn_threshold_bytes": {"minimum": 0, "limit": _UNALLOCATED},
    "mtu_bytes": {"minimum": MIN_MTU_BYTES, "maximum": MAX_MTU_BYTES},
    "switch_radix": {"minimum": 1, "limit": "none: a size both tiers must fit in"},
    "pfc_priority": {"limit": "0..7, an 802.1p priority (checked by the fabric)"},
    "pfc_quanta": {"limit": "1..65535, the 16-bit PAUSE field (checked by the fabric)"},
    "pfc_xoff_bytes": {"minimum": 0, "limit": _UNALLOCATED},
    "pfc_xon_bytes": {"minimum": 0, "limit": "below pfc_xoff_bytes"},
    "pfc_headroom_bytes": {"minimum": 0, "limit": _UNALLOCATED},
    "pfc_watchdog_us": {"minimum": 0, "maximum": MAX_DELAY_NS / 1000},
    "pfc_watchdog_restore_us": {"minimum": 0, "maximum": MAX_DELAY_NS / 1000},
    "lossless_ecn_kmin_bytes": {"minimum": 0, "limit": _UNALLOCATED},
    "lossless_ecn_kmax_bytes": {"minimum": 0, "limit": _UNALLOCATED},
    "lossless_ecn_pmax": {"limit": "a probability in [0, 1] (checked by the fabric)"},
}
#: Defaults FabricSpec derives from other keys (its None defaults).
_DERIVED = {"t1_per_plane": "hosts_per_t0 (non-oversubscribed)",
            "trim_threshold_bytes": "buffer_bytes (trim when full)", "switch_radix": "no limit",
            "pfc_xoff_bytes": "2 x ecn_threshold_bytes (so DCQCN's marks come before pauses), "
                              "at least 16 full-MTU packets", "pfc_xon_bytes": "pfc_xoff_bytes / 2",
            "pfc_headroom_bytes": "the least that holds a pause's in-flight bytes",
            "pfc_watchdog_restore_us": "pfc_watchdog_us"}


def _fields() -> tuple[Field, ...]:
    hints = typing.get_type_hints(FabricSpec)
    out = [Field("preset", "string", "a topology preset; the keys below override it",
                 default=Derived(f"{DEFAULT_PRESET!r} when [fabric] sets nothing"),
                 choices=tuple(sorted(PRESETS)))]
    for f in dataclasses.fields(FabricSpec):
        if f.name == "name":
            continue
        unit, doc = _DOCS[f.name]
        default = Derived(_DERIVED[f.name]) if f.default is None else f.default
        out.append(Field(f.name, type_word(hints[f.name]), doc, default=default, unit=unit,
                         **_BOUNDS.get(f.name, {})))
    return tuple(out)


FIELDS = _fields()


def fabric(table: Any) -> tuple[FabricSpec, str | None]:
    """The fabric a ``[fabric]`` table describes, and the preset it names (if any)."""
    table = check_table(table, "fabric")
    values = check_types(FIELDS, table, "fabric")
    preset_name = values.pop("preset", None)
    if preset_name is None and not values:
        preset_name = DEFAULT_PRESET
    try:
        if preset_name is not None:
            spec = preset(preset_name, **values)
        else:
            spec = FabricSpec(**values)
    except FabricError as exc:
        raise LabError(str(exc), "fabric") from None
    return spec, preset_name
