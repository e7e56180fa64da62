"""MRC: one sans-IO queue pair per QP, spraying over many EVs.

Everything is driven through the :mod:`mrc.transport.base` contract (``post_write``,
``receive``, ``handle_timer``, ``poll``, ``take_control``, ``next_timer``, ``events``); the QP
never reads a clock and never sees fabric state, only the EV set it was given
(:mod:`mrc.stack.evset`). Each QP is both a sender (of its own WRITEs) and a receiver
(of its peer's).

The QP is split into rooms, one concept each, owned and wired by :class:`MrcQueuePair`:

============  ==============================================================================
``qp``        ``MrcQueuePair``: the contract, its identity and outputs; binds the rooms
``sender``    segmentation at the MTU, EV choice (round robin or REPS), DATA packets
``receiver``  placement, cumulative ACK + SACK, coalescing, trim NACKs, probe replies
``spray``     the EV choice (round robin or REPS, steered by delay): choose, feedback
``recovery``  ACK and NACK processing: delivery, trims, the reorder windows' samples
``loss``      loss evidence (same-EV FIFO, overdue on other EVs), retransmission, RTO, the
              QP's timer table (the base class of recovery's)
``watchdog``  the retry rule on the local ACK timeout, and the QP error
``reorder``   the reorder window an overdue scope learns from the delays it sees
``paths``     the EV set: GOOD / ASSUMED_BAD / DENIED, port down, probes, reintegration
``cc``        congestion control (NSCC-like, or a fixed window)
``records``   the EV, message and segment records the rooms share, the segment states
``evmap``     EV values -> three integers (plane, place, reply path), for per-ACK lookups
``config``    ``MrcConfig`` (every knob), ``MrcStats`` (every counter)
============  ==============================================================================

One WRITE, end to end: ``post_write`` queues it (sender) and arms the watchdog.
When a NIC port of plane *p* is idle the driver calls ``poll(now, p)``: the sender cuts the
next MTU-sized segment, picks a GOOD EV of *p* and returns the DATA packet, recording the
transmission on the EV's FIFO and in recovery's send-order queues. At the peer,
``receive`` hands the DATA to the receiver, which places it once and answers with an ACK
along the reply path of that EV (``take_control``). Back at the sender, ``receive`` hands
the ACK to recovery: the acknowledged segments leave the pipe, the RTT feeds the congestion
control and the reorder windows, earlier packets on the same EV (or overdue ones on others)
are suspected lost and, after the grace, queued for retransmission, and an EV with evidence
against it goes ASSUMED_BAD in the path manager, which probes it until it answers again.
"""

from mrc.transport.mrc.config import CcConfig, MrcConfig, MrcStats
from mrc.transport.mrc.qp import MrcQueuePair

__all__ = ["CcConfig", "MrcConfig", "MrcQueuePair", "MrcStats"]
