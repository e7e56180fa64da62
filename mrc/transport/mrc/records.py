"""The records an MRC QP's rooms share: one EV (:class:`Ev`), one posted WRITE
(:class:`Msg`), one packet across its transmissions (:class:`Seg`), one transmission of a
packet (:class:`Tx`), and the queues of transmissions loss recovery walks (:class:`TxQueue`).

Plain slotted objects: the sender creates them, recovery and the path manager update them
on the per-packet path, so every room reads and writes their fields directly.

Why transmissions are records in linked queues
    Every packet sent is queued four times (its EV's FIFO, the RTO queue, its plane's and
    its QP's overdue scopes, :mod:`.loss`), and each queue is consumed from the front,
    lazily: an entry whose segment was sent again (``seg.tx`` moved on) or resolved is
    dropped when it comes up. One :class:`Tx` per transmission, threaded through one link
    field per queue, costs one object per packet (from a free list when compiled) and no
    tuple, no boxed integer and no method call on a deque: appending and popping are a few
    typed field stores. Chains run forward only (no cycles); whoever pops a record clears
    its link, so a record still held by another queue keeps no popped chain alive, and a
    queue dropped whole is freed without deep recursion (``trashcan``).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from mrc.packet import split_address
from mrc.transport.base import GOOD, EvState, PathChoice

try:
    import cython
    from cython import trashcan
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]
    from mrc._cython_shim import freelist as trashcan  # (both leave a class as it is)


class SegState(IntEnum):
    """The sender-side state of one packet (a :class:`Seg`). An ``IntEnum``: compiled, a
    segment keeps its state in a C integer. A packet is *live* (counted in the pipe, its
    latest transmission may still arrive) while INFLIGHT or SUSPECT; the rooms test for
    those two by name, never by the members' order."""

    INFLIGHT = 0  # sent, counted in flight
    SUSPECT = 1  # evidence says lost; waiting ``loss_grace_ps`` for a trim NACK
    LOST = 2  # waiting for retransmission
    ACKED = 3


# the members as module names: compiled, the rooms keep typed C copies of them
INFLIGHT = SegState.INFLIGHT
SUSPECT = SegState.SUSPECT
LOST = SegState.LOST
ACKED = SegState.ACKED


@cython.cclass
class Msg:
    """A posted WRITE on the sender side."""

    msg_id: int
    length: cython.longlong
    key: int
    payload: Any
    imm: Any
    posted_ps: cython.longlong
    next_offset: cython.longlong
    unacked: cython.longlong
    segmented: cython.bint
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

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

    seq: cython.longlong
    msg: Msg
    offset: cython.longlong
    length: cython.longlong
    ev: Ev
    tx: cython.longlong
    sent_ps: cython.longlong
    state: cython.longlong
    sends: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, seq: int, msg: Msg, offset: int, length: int) -> None:
        self.seq = seq
        self.msg = msg
        self.offset = offset
        self.length = length
        self.ev = None  # type: ignore[assignment]  # set by the first transmission
        self.tx = 0  # id of the current transmission (global, increasing)
        self.sent_ps = 0
        self.state = INFLIGHT
        self.sends = 0


@cython.ccall
@cython.annotation_typing(True)
def new_seg(seq: cython.longlong, msg: Msg, offset: cython.longlong,
            length: cython.longlong) -> Seg:
    """``Seg(seq, msg, offset, length)`` for the sender's per-packet path: compiled, the
    record comes from the free list with no argument tuple, boxed integers or ``__init__``
    call (a cross-module C call instead of a Python one)."""
    seg: Seg = Seg.__new__(Seg)
    seg.seq = seq
    seg.msg = msg
    seg.offset = offset
    seg.length = length
    seg.ev = None  # type: ignore[assignment]  # set by the first transmission
    seg.tx = 0
    seg.sent_ps = 0
    seg.state = INFLIGHT
    seg.sends = 0
    return seg


@trashcan(True)
@cython.freelist(1024)
@cython.cclass
class Tx:
    """One transmission of a segment: when it was sent, which segment, and the id of the
    transmission (``seg.tx`` equals it while this is the segment's latest), with one link
    per queue that holds it (see the module docstring). Made only by :func:`new_tx`.

    A transmission may also wait out a loss grace (:mod:`.loss`): ``due``, ``overdue``
    (which evidence made it suspect) and ``next_suspect`` serve that queue. It is suspected
    at most once (only while its segment is INFLIGHT on it), so one link suffices.
    """

    sent_ps: cython.longlong
    seg: Seg
    tx: cython.longlong
    next_sent: Tx | None  # the sender's RTO queue (``Sender.sent``)
    next_ev: Tx | None  # its EV's FIFO (the :class:`Ev` itself)
    next_plane: Tx | None  # its plane's overdue scope (``Sender.sent_on_plane``)
    next_qp: Tx | None  # the QP's overdue scope (``Sender.sent_on_qp``)
    due: cython.longlong
    overdue: cython.bint
    next_suspect: Tx | None  # recovery's suspects (``Recovery._suspects``)
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)


@cython.ccall
@cython.annotation_typing(True)
def new_tx(sent_ps: cython.longlong, seg: Seg, tx: cython.longlong) -> Tx:
    """A transmission record, linked to nothing yet (compiled: from the free list, without
    a Python call)."""
    t: Tx = Tx.__new__(Tx)
    t.sent_ps = sent_ps
    t.seg = seg
    t.tx = tx
    t.next_sent = t.next_ev = t.next_plane = t.next_qp = t.next_suspect = None
    t.due = 0
    t.overdue = False
    return t


#: which of :class:`Tx`'s links threads a :class:`TxQueue` (the queue's role)
LINK_EV = 0  # an EV's FIFO: ``Tx.next_ev``
LINK_SENT = 1  # the sender's RTO queue: ``Tx.next_sent``
LINK_PLANE = 2  # a plane's overdue scope: ``Tx.next_plane``
LINK_QP = 3  # the QP's overdue scope: ``Tx.next_qp``
LINK_SUSPECT = 4  # recovery's suspects: ``Tx.next_suspect``
# typed copies for ``TxQueue.push`` (compiled, C integers; the names above stay the module's
# Python attributes, which the sender and recovery import)
_EV = cython.declare(cython.longlong, LINK_EV)
_SENT = cython.declare(cython.longlong, LINK_SENT)
_PLANE = cython.declare(cython.longlong, LINK_PLANE)
_QP = cython.declare(cython.longlong, LINK_QP)


@cython.cclass
class TxQueue:
    """Transmissions in send order, oldest first: the head and tail of a chain threaded
    through one of :class:`Tx`'s links, the one its ``link`` names (an :class:`Ev`, which
    is one, uses ``next_ev``, and so on). The producer appends with :meth:`push`
    (``head`` is None: the queue is empty, whatever ``tail`` still points to); consumers read
    the head and drop it with :meth:`pop`."""

    head: Tx | None
    tail: Tx  # meaningful while head is not None
    link: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, link: int) -> None:
        self.head = None
        self.tail = None  # type: ignore[assignment]
        self.link = link

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(check=False)
    def push(self, t: Tx) -> cython.void:
        """Append ``t`` at the tail, through this queue's link (a C call when compiled)."""
        if self.head is None:
            self.head = t
        else:
            tail: Tx = self.tail
            link: cython.longlong = self.link
            if link == _EV:
                tail.next_ev = t
            elif link == _SENT:
                tail.next_sent = t
            elif link == _PLANE:
                tail.next_plane = t
            elif link == _QP:
                tail.next_qp = t
            else:
                tail.next_suspect = t
        self.tail = t

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(check=False)
    def pop(self) -> cython.void:
        """Drop the head (its consumer has read it): the next record through this queue's
        link becomes the head, and the dropped record's link is cleared, so it keeps no
        popped chain alive while another queue still holds it."""
        t: Tx | None = self.head
        if t is None:
            return
        link: cython.longlong = self.link
        if link == _EV:
            self.head = t.next_ev
            t.next_ev = None
        elif link == _SENT:
            self.head = t.next_sent
            t.next_sent = None
        elif link == _PLANE:
            self.head = t.next_plane
            t.next_plane = None
        elif link == _QP:
            self.head = t.next_qp
            t.next_qp = None
        else:
            self.head = t.next_suspect
            t.next_suspect = None


@cython.cclass
class Ev(TxQueue):
    """Sender-side state of one EV, and its transmissions in send order.

    An EV is its own FIFO (a :class:`TxQueue` through ``Tx.next_ev``): loss inference walks
    it. A QP has 128+ EVs, each carrying a few packets at a time, and every packet's send
    and ACK touch its EV and the queue's ends: in one object, that is one object and one
    cache line fewer per EV than a queue of its own (a deque would cost 600 bytes)."""

    # What a packet's send (spray, transmit) and its ACK touch first, after the FIFO's ends
    # (TxQueue's fields), in one or two cache lines of the C struct; the probe state and the
    # rarer counters after.
    ev: cython.longlong
    plane: cython.longlong
    usable: cython.bint
    addr_hi: cython.ulonglong
    addr_lo: cython.ulonglong
    sent: cython.longlong
    last_sent: cython.longlong  # send time of its newest transmission
    acked: cython.longlong
    strikes: cython.longlong  # overdue losses since the EV last delivered a packet
    state: Any
    t1: Any
    address: int
    epoch: cython.longlong  # bumped on every state change: stale probe timers die
    probe_seq: cython.longlong
    probe_ok: cython.longlong
    #: (probe seq, sent ps) of its probes awaiting replies, oldest first; None until it is
    #: first probed (most EVs never are)
    probes_out: list[tuple[int, int]] | None
    lost: cython.longlong
    trims: cython.longlong
    timeouts: cython.longlong
    #: deliveries that came back slow or hot (:mod:`.spray`): not recycled
    slow: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, choice: PathChoice) -> None:
        self.head = None
        self.tail = None  # type: ignore[assignment]  # meaningful while head is not None
        self.link = LINK_EV
        self.ev = choice.ev
        self.plane = choice.plane
        self.t1 = choice.t1
        self.address = choice.address
        self.addr_hi, self.addr_lo = split_address(choice.address)  # as packets carry it
        self.state: EvState = GOOD
        self.usable = True
        self.epoch = 0
        self.probe_seq = 0
        self.probe_ok = 0
        self.probes_out = None
        self.sent = 0
        self.acked = 0
        self.lost = 0
        self.trims = 0
        self.timeouts = 0
        self.strikes = 0
        self.last_sent = -1
        self.slow = 0

    @property
    def choice(self) -> PathChoice:
        return PathChoice(self.ev, self.plane, self.t1, self.address)
