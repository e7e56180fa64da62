"""The labs layer's checks around a live run: what the live runtime cannot carry (refused
before it starts) and whether it kept pace with its own modelled clock (judged after, for a
kernel run too: its hosts are the live runtime's, in one Python process).

Why the pace matters: a live run keeps modelled time in step with the wall clock slowed by
the dilation, but the process doing the work is one Python thread. When it cannot do a
modelled microsecond's work in ``dilation`` wall microseconds, NIC ports wake up late; a
port that wakes later than its catch-up allowance sends less than its line rate allowed,
and the modelled goodput reads low although nothing in the model was slow (seen: 1158 Gb/s
instead of 1514 at ``--dilation 5000``). The hosts count that skipped sending time
(``tx_lost_ps``); the kernel counts datagrams it dropped on full socket buffers. Either one
above a small threshold means the modelled rates are understated, and the run says so in its
table, its summary (``live.kept_up``, ``live.pace``) and on stderr.

Neither counter sees a run whose senders wait on ACKs: a window-limited port is idle, not
late, so it loses no sending time, while every packet crosses a fabric that runs its events
late and the window waits longer than the model says. The fabric measures that lag (how late
its events ran behind the clock, in modelled time); its mean above a quarter of the fabric's
unloaded round trip stretches every round trip by as much, and the run did not keep pace
either (seen: ``--dilation 1`` on an 8-host lab, 160 us of mean lag against a 7.8 us round
trip, nothing delivered in the measured window, and no sending time lost). The hosts measure
their own lag the same way: how late their QPs' timers fire (``wakes``, ``wake_late_ps``).
On the kernel fabric, where the kernel forwards in real time, that is the one sign of a host
process that cannot keep up (seen: ``--dilation 20``, nothing delivered, 96 EVs marked bad
on a healthy fabric, 0.7% of sending time lost).

The suggested dilation is an estimate, named as one: the lost share and the lag (in modelled
time) fall roughly in proportion to the dilation, so it asks for the next 1-2-5 factor that
would bring the worst transport's under its threshold, at least twice the one used.
"""

from __future__ import annotations

import math
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.lab import (
    Collective,
    ConnectionMatrix,
    Lab,
    Permutation,
    WriteBw,
    sending_hosts,
)
from mrc.packet import IMMDT_BYTES, data_bytes

#: Sending time lost to late wake-ups above this share of the sending ports' time: the run
#: did not keep pace (a percent).
MAX_LOST_PCT = 1.0
#: The fabric's mean lag, or the hosts' mean lateness of their timers, above this share of
#: the unloaded round trip (:meth:`~topology.spec.FabricSpec.base_rtt_ps`): the run did not
#: keep pace.
MAX_LAG_RTT_SHARE = 0.25
#: The largest UDP payload over IPv4 (65,535 - 20 - 8); a live packet is one datagram.
MAX_UDP_PAYLOAD_IPV4 = 65_507
MAX_UDP_PAYLOAD_IPV6 = 65_527
#: The live runtime holds every message's real bytes (and a pool as large as the largest).
MAX_LIVE_MESSAGE_BYTES = 1 << 30


def check_live_lab(lab: Lab, bind_host: str = "127.0.0.1") -> None:
    """Refuse, before any socket is opened, what the live runtime cannot carry."""
    limit = MAX_UDP_PAYLOAD_IPV6 if ":" in bind_host else MAX_UDP_PAYLOAD_IPV4
    packet = data_bytes(lab.fabric.mtu_bytes) + IMMDT_BYTES
    if packet > limit:
        biggest = limit - (data_bytes(0) + IMMDT_BYTES)
        raise LabError(f"{lab.fabric.mtu_bytes} bytes make {packet}-byte packets, more than "
                       f"one UDP datagram carries ({limit}); the live runtime sends each "
                       f"packet as one datagram: at most {biggest}", "fabric.mtu_bytes",
                       lab.source)
    for key, size in _message_sizes(lab):
        if size > MAX_LIVE_MESSAGE_BYTES:
            raise LabError(f"{size:,} bytes is more than the live runtime holds in memory per "
                           f"message ({MAX_LIVE_MESSAGE_BYTES:,}); it carries real bytes",
                           key, lab.source)


def _message_sizes(lab: Lab) -> list[tuple[str, int]]:
    w = lab.workload
    if isinstance(w, WriteBw):
        return [("workload.message_bytes", w.message_bytes)]
    if isinstance(w, Collective):
        return [("workload.sizes_bytes", max(w.sizes_bytes))]
    if isinstance(w, Permutation):
        return [("workload.size_bytes", w.size_bytes)]
    if isinstance(w, ConnectionMatrix):
        return [("workload.file" if w.file else "workload.text",
                 max(f.size_bytes for f in w.flows))]
    return []


def sending_ports(lab: Lab) -> int:
    """NIC ports that carry the workload's DATA (the time base of the lost share)."""
    return max(1, len(sending_hosts(lab.workload))) * lab.fabric.planes


def _next_step(value: float) -> float:
    """The smallest 1-2-5 factor at or above ``value``."""
    exp = math.floor(math.log10(max(value, 1.0)))
    for e in (exp, exp + 1):
        for step in (1, 2, 5):
            if step * 10 ** e >= value:
                return float(step * 10 ** e)
    return float(10 ** (exp + 1))


def judge_pace(result: Any, runtime: str = "live") -> dict[str, Any]:
    """Judge a finished live or kernel run's pace and record it in ``result.summary[runtime]``
    (``"live"`` or ``"kernel"``): ``kept_up``, ``pace`` (per transport: the NIC ports' lost
    share, the hosts' late wake-ups, kernel drops and, live, the fabric's lag) and, when it
    fell behind, ``pace_warning`` and ``suggested_dilation``. Returns that entry."""
    summary = result.summary
    info = summary.setdefault(runtime, {})
    dilation = float(info.get("dilation") or info.get("scale") or 0)
    ports = sending_ports(result.lab)
    rtt_us = result.lab.fabric.base_rtt_ps() / 1e6
    max_lag_us = MAX_LAG_RTT_SHARE * rtt_us
    limit = f"more than {MAX_LAG_RTT_SHARE:.0%} of the fabric's {rtt_us:.3g} us unloaded " \
            "round trip"
    pace: dict[str, Any] = {}
    worst = 0.0  # the worst transport's excess over a limit (1: at the limit)
    behind: list[str] = []
    for name, entry in summary.get("transports", {}).items():
        run = entry.get(runtime) or {}
        hosts = run.get("hosts") or {}
        model_us = float(run.get("model_us") or 0)
        lost_ps = int(hosts.get("tx_lost_ps", 0) or 0)
        lost_pct = 100 * lost_ps / (ports * model_us * 1e6) if model_us > 0 else 0.0
        wakes = int(hosts.get("wakes", 0) or 0)
        wake_us = int(hosts.get("wake_late_ps", 0) or 0) / wakes / 1e6 if wakes else 0.0
        kernel = run.get("kernel_drops" if runtime == "live" else "socket_drops")
        fabric = run.get("fabric") or {}
        lag_us = float(fabric.get("lag_mean_us") or 0)
        row: dict[str, Any] = {"tx_lost_pct": round(lost_pct, 3),
                               "wake_late_mean_us": round(wake_us, 6), "kernel_drops": kernel}
        if runtime == "live":
            row["fabric_lag_max_us"] = fabric.get("lag_max_us")
            row["fabric_lag_mean_us"] = fabric.get("lag_mean_us")
        pace[name] = row
        worst = max(worst, lost_pct / MAX_LOST_PCT, lag_us / max_lag_us, wake_us / max_lag_us)
        if lost_pct > MAX_LOST_PCT:
            behind.append(f"{name}: its NIC ports lost {lost_pct:.1f}% of their sending time "
                          "to late wake-ups")
        if wake_us > max_lag_us:
            behind.append(f"{name}: its hosts woke their QPs' timers {wake_us:.3g} us late on "
                          f"average, {limit}")
        if lag_us > max_lag_us:
            behind.append(f"{name}: the fabric ran its events {lag_us:.3g} us late on "
                          f"average, {limit}")
        if kernel:
            behind.append(f"{name}: the kernel dropped {kernel} datagrams on full socket "
                          "buffers")
    info["pace"] = pace
    info["kept_up"] = not behind
    if behind and dilation > 0:
        suggested = _next_step(dilation * max(2.0, worst))
        info["suggested_dilation"] = suggested
        info["pace_warning"] = (
            f"the {runtime} runtime fell behind its modelled clock at --dilation {dilation:g} ("
            + "; ".join(behind) + "), so the modelled rates are understated; rerun with "
            f"--dilation {suggested:g} or more (an estimate)")
    return info
