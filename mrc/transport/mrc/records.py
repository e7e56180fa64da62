"""The records an MRC QP's rooms share: one EV (:class:`Ev`), one posted WRITE
(:class:`Msg`) and one packet across its transmissions (:class:`Seg`).

Plain slotted objects: the sender creates them, recovery and the path manager update them
on the per-packet path, so every room reads and writes their fields directly.
"""

from __future__ import annotations

from mrc.packet import split_address
from mrc.transport.base import GOOD, PathChoice

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

# sender-side state of one packet (a segment)
INFLIGHT = 0  # sent, counted in flight
SUSPECT = 1  # a later packet on its EV was acked; waiting loss_grace_ps for a NACK
LOST = 2  # waiting for retransmission
ACKED = 3


class Ev:
    """Sender-side state of one EV."""

    __slots__ = ("ev", "plane", "t1", "address", "addr_hi", "addr_lo", "state", "usable", "fifo", "epoch",
                 "probe_seq", "probe_ok", "probes_out", "sent", "acked", "lost", "trims",
                 "timeouts", "strikes", "last_sent", "slow")

    def __init__(self, choice: PathChoice) -> None:
        self.ev = choice.ev
        self.plane = choice.plane
        self.t1 = choice.t1
        self.address = choice.address
        self.addr_hi, self.addr_lo = split_address(choice.address)  # as packets carry it
        self.state = GOOD
        self.usable = True
        #: (segment, tx) in send order: the FIFO that loss inference walks. Lists, not
        #: deques: an EV carries a few packets at a time, and a QP has 128+ EVs (an empty
        #: deque costs 600 bytes, a list 56: 0.35 GB on a 1024-host permutation)
        self.fifo: list[tuple[Seg, int]] = []
        self.epoch = 0  # bumped on every state change: stale probe timers die
        self.probe_seq = 0
        self.probe_ok = 0
        self.probes_out: list[tuple[int, int]] = []  # (probe seq, sent ps), oldest first
        self.sent = 0
        self.acked = 0
        self.lost = 0
        self.trims = 0
        self.timeouts = 0
        self.strikes = 0  # overdue losses since the EV last delivered a packet
        self.last_sent = -1  # send time of its newest transmission
        self.slow = 0  # deliveries that came back slow or hot (:mod:`.spray`): not recycled

    @property
    def choice(self) -> PathChoice:
        return PathChoice(self.ev, self.plane, self.t1, self.address)


class Msg:
    """A posted WRITE on the sender side."""

    __slots__ = ("msg_id", "length", "key", "payload", "imm", "posted_ps", "next_offset",
                 "unacked", "segmented")

    def __init__(self, msg_id: int, length: int, key: int, payload: bytes | None,
                 imm: int | None, posted_ps: int) -> None:
        self.msg_id = msg_id
        self.length = length
        self.key = key
        self.payload = payload
        self.imm = imm
        self.posted_ps = posted_ps
        self.next_offset = 0
        self.unacked = 0  # segments created and not yet acknowledged
        self.segmented = False


@cython.freelist(1024)
@cython.cclass
class Seg:
    """One packet (PSN) on the sender side, across all its transmissions. (Compiled, freed
    ones are kept for reuse: one is made per packet sent.)"""

    __slots__ = ("seq", "msg", "offset", "length", "ev", "tx", "sent_ps", "state", "sends")

    def __init__(self, seq: int, msg: Msg, offset: int, length: int) -> None:
        self.seq = seq
        self.msg = msg
        self.offset = offset
        self.length = length
        self.ev: Ev = None  # type: ignore[assignment]  # set by the first transmission
        self.tx = 0  # id of the current transmission (global, increasing)
        self.sent_ps = 0
        self.state = INFLIGHT
        self.sends = 0
