"""What a lab's stall metric reads from a run: each QP's gaps between placements.

A QP *makes progress* when its receiver places new bytes in memory (the unit of goodput);
the NIC driver keeps, per QP, every gap between two placements longer than a floor that a
retransmitted packet ended (``QpContext.gaps``, two compares per placed packet: a gap a fresh
packet ends is the sender's idleness, a QP waiting for its connection's other QPs), the time
of the last placement and of the last retransmission it sent.
The stack sets that floor to the stall threshold, :func:`stall_threshold_ps`: **3 base RTTs
of the fabric** (23.5 us on ``lab-8plane``): longer than a congestion wobble or a loss a NAK
repairs (one to two RTTs), short enough that a QP a 20 us link flap stops (about 30 us in
``t0-t1-link-flap``), a timeout or a routing repair stops is counted. mrc-lab's own choice;
the report layer (:mod:`mrc.labs.report.stalls`) turns the gaps into QPs hit and stall
lengths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from topology.spec import FabricSpec

#: The stall threshold in base RTTs of the fabric.
STALL_RTTS = 3


def stall_threshold_ps(spec: FabricSpec) -> int:
    """No progress for longer than this is a stall: :data:`STALL_RTTS` base RTTs."""
    return STALL_RTTS * spec.base_rtt_ps()


def placement_gaps(nics: Sequence[Any], owned: Iterable[tuple[int, int]]) -> list[dict[str, Any]]:
    """Per QP of ``owned`` ((qpn, host) pairs, in order) that placed data: its name, its gaps
    over the floor that a retransmission ended (ps), its last placement (ps), and when its
    sender (the peer end: ``peer`` host, ``peer_qpn`` or the same QPN) last sent a
    retransmission (ps, -1: never), which says whether a gap still open at the end had lost
    data outstanding."""
    out = []
    for qpn, host in owned:
        ctx = _context(nics, host, qpn)
        if ctx is None or ctx.last_placed < 0:
            continue  # a QP that received no data (a requester's own side) is no receiver
        qp = ctx.qp
        sender = _context(nics, getattr(qp, "peer", -1), getattr(qp, "peer_qpn", qpn))
        out.append({"qp": f"h{host}/{qpn}", "gaps": [(int(a), int(b)) for a, b in ctx.gaps],
                    "last_placed_ps": int(ctx.last_placed),
                    "sender_last_retx_ps": -1 if sender is None else int(sender.last_retx)})
    return out


def _context(nics: Sequence[Any], host: int, qpn: int) -> Any:
    if not 0 <= host < len(nics):
        return None
    contexts: Mapping[int, Any] = getattr(nics[host], "_contexts", {})
    return contexts.get(qpn)
