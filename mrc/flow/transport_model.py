"""What the flow model takes of one transport (:class:`TransportModel`, from its lab config)
and what it gives back (:class:`Trace`: segments of constant rates, event rows, outcome)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mrc.flow.paths import Groups


@dataclass(frozen=True)
class TransportModel:
    """What the flow model needs of one transport (from its lab config)."""

    name: str
    kind: str  # mrc | rc
    reps: bool = True  # MRC: spray = "reps"
    reintegrate_ps: int = 0  # MRC: probes_to_reintegrate x probe_interval
    error_after_ps: int | None = None  # MRC: no live path this long -> QP error; RC: retries
    timeout_ps: int | None = None  # RC local ACK timeout (None: waits forever)
    retry_cnt: int = 7
    qps: int = 1  # RC QPs per connection (qps_per_plane x planes)
    resend_packets: float = 0.0  # RC go-back-N: packets resent per loss (the window)
    ack_ratio: float = 0.0  # ACK wire bytes per DATA wire byte (reverse path)
    ev_count: int = 128  # MRC: EVs per QP
    profile: Any = None  # MRC: its EV profile (mrc.ev.profile.EvProfile; None: generated)
    pfc: bool = False  # RC: DATA on the fabric's lossless class (PFC)
    timeout_packets: float = 0.0  # RC: packets the line carries in one local ACK timeout
    resume_ps: int = 0  # RC: path back -> NAK -> rewind -> first resent packet placed
    fill_ps: float = float("inf")  # RC: time to send a full window at the line
    pkt_ps: float = 0.0  # RC: one full DATA packet at the line
    dcqcn: Any = None  # RC: its DcqcnConfig when cc = "dcqcn" (None: no rate control)
    line_bps: float = 0.0  # RC: the port's wire rate (DCQCN's ceiling)
    goodput_fraction: float = 1.0  # payload share of the wire (DCQCN rates are wire rates)
    detect: Any = None  # MRC: its DetectParams (mrc.flow.detection; None: no detection delay)
    #: RC: the local ACK timer's expiries after the last progress (the adaptive ladder or the
    #: fixed timer, ``retry_schedule``'s first episode), ps
    retry_offsets: tuple[int, ...] = ()
    routing: Any = None  # RC: the routed fabric's RoutingConfig (None: QPs keep their T1)
    wire_per_payload: float = 1.0  # RC: its wire bytes per payload byte over MRC's


Row = tuple[float, str, str, dict[str, Any]]


@dataclass
class Trace:
    """What one transport did: segments of constant rates, event rows, outcome."""

    name: str
    kind: str
    times: list[float] = field(default_factory=list)  # segment starts (ps); last = end
    total: list[float] = field(default_factory=list)  # Gb/s per segment
    planes: list[np.ndarray] = field(default_factory=list)
    bad_evs: list[float] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    failed_at_ps: float | None = None
    failure_reason: str | None = None
    end_ps: float = 0.0
    solves: int = 0
    rounds: int = 0
    marked_bad: float = 0.0
    reintegrated: float = 0.0


def group_label(groups: Groups, g: int) -> str:
    """How event rows name group ``g``: its hosts, or its connection class."""
    if groups.src_host is not None and groups.dst_host is not None:
        return f"h{groups.src_host[g]}->h{groups.dst_host[g]}"
    return f"{int(groups.mult[g])} connections (class {groups.src[g]}->{groups.dst[g]})"
