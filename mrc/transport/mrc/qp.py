# cython: infer_types=False
"""The MRC queue pair: the sans-IO contract of :mod:`mrc.transport.base`, over its rooms.

``MrcQueuePair`` owns one of each room and wires them together: the path manager
(:mod:`.paths`), the sender (:mod:`.sender`), the receiver (:mod:`.receiver`), loss recovery
(:mod:`.recovery`), the watchdog (:mod:`.watchdog`) and the congestion control
(:mod:`.cc`). It keeps the QP's identity and outputs (``events``, the control packets, ``bytes_placed``, ``failed``), which the rooms
reach through it (:class:`.config.QpCore`); everything else lives in the room it belongs to,
and rooms hold direct references to the state they share (the segments, the EV table).

Each QP is both a sender (of its own WRITEs) and a receiver (of its peer's): both halves are
always built, and each is used only when its packets come.

The per-packet entry points (:class:`~mrc.transport.qp_base.QpBase`, which the driver calls)
hand straight over to the room they concern: ``poll`` to the sender, ``next_timer`` and
``handle_timer`` to recovery, and ``receive`` to the receiver, recovery or path manager.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Sequence
from typing import Any

from mrc.packet import ACK, DATA, NACK, PROBE, PROBE_REPLY, Packet
from mrc.transport.base import EvState, PathChoice, TransportEvent
from mrc.transport.memory import expected_checksum, message_key, payload_sha256
from mrc.transport.mrc.cc import CongestionControl, make_cc
from mrc.transport.mrc.config import MPR_UNIT_PSNS, MrcConfig, MrcStats
from mrc.transport.mrc.paths import EvSelector, PathManager
from mrc.transport.mrc.receiver import Receiver
from mrc.transport.mrc.records import Msg
from mrc.transport.mrc.recovery import Recovery
from mrc.transport.mrc.sender import Sender
from mrc.transport.mrc.watchdog import Watchdog
from mrc.transport.qp_base import QpBase

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

# typed copies (compiled, C integers)
_ACK = cython.declare(cython.longlong, ACK)
_DATA = cython.declare(cython.longlong, DATA)
_NACK = cython.declare(cython.longlong, NACK)
_PROBE = cython.declare(cython.longlong, PROBE)
_PROBE_REPLY = cython.declare(cython.longlong, PROBE_REPLY)


@cython.cclass
class MrcQueuePair(QpBase):
    """An MRC QP between ``host`` and ``peer`` (see :mod:`mrc.transport.mrc`).

    ``evs``: this QP's EVs toward the peer (``evset.build_ev_set``). ``reply_evs``: the path
    back to the peer for each EV the *peer* sprays with; None when both sides' sets were
    built as a symmetric pair (then the own set answers). ``psn``/``peer_psn``: first PSN
    this side sends / expects. ``key_seed`` feeds ``memory.message_key``.
    """

    # The rooms every packet is handed to, and the control queue, first (next to QpBase's
    # fields in the C struct's first cache line); the rest after.
    _sender: Sender
    _receiver: Receiver
    _recovery: Recovery
    #: control packets (ACK, NACK, PROBE, PROBE_REPLY) waiting for ``take_control``
    control: list[Packet]
    _watchdog: Watchdog
    _path_manager: PathManager
    host: cython.longlong
    peer: cython.longlong
    peer_qpn: cython.longlong
    mtu: cython.longlong
    config: MrcConfig
    key_seed: int
    error_reason: Any  # str | None
    stats: MrcStats
    cc: CongestionControl
    _rto: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, qpn: int, host: int, peer: int, peer_qpn: int, mtu: int,
                 evs: Sequence[PathChoice], *, reply_evs: Sequence[PathChoice] | None = None,
                 config: MrcConfig | None = None, cc: CongestionControl | None = None,
                 psn: int = 0, peer_psn: int = 0, key_seed: int = 0) -> None:
        if mtu <= 0:
            raise ValueError("mtu must be positive")
        if not evs:
            raise ValueError("an MRC QP needs at least one EV")
        self.qpn = qpn
        self.host = host
        self.peer = peer
        self.peer_qpn = peer_qpn
        self.mtu = mtu
        self.config = cfg = config or MrcConfig()
        self.key_seed = key_seed
        self.events: deque[TransportEvent] = deque()
        self.control = []
        self.bytes_placed = 0
        self.failed = False
        self.error_reason = None
        self.stats = MrcStats()
        self.cc = cc if cc is not None else make_cc(cfg.cc)
        self._rto = cfg.ev_timeout_ps

        # ---- the rooms
        self._path_manager = paths = PathManager(self, evs)
        self._sender = sender = Sender(self, paths, self.cc, psn)
        self._receiver = receiver = Receiver(
            self, paths.evs, reply_evs if reply_evs is not None else evs, peer_psn)
        self._watchdog = watchdog = Watchdog(self, paths, sender, receiver)
        self._recovery = recovery = Recovery(self, paths, sender, receiver, self.cc, watchdog)
        paths.progress = watchdog.progress
        paths.evict = recovery.evict

    # ================================================================== views
    @property
    def window(self) -> int:
        return self.cc.window

    @property
    def inflight_bytes(self) -> int:
        return self._sender.pipe

    @property
    def rto_ps(self) -> int:
        """The per-EV path timer (``ev_timeout_ps``)."""
        return self._rto

    @property
    def poll_timer_floor_ps(self) -> int:
        """The soonest deadline a ``poll`` can create, relative to its ``now`` (the RTO of
        the packet it sends). Drivers need not re-read ``next_timer`` after a poll while a
        wake-up is armed before that."""
        return self._rto

    @property
    def paths(self) -> list[PathChoice]:
        return self._path_manager.choices()

    def ev_state(self, ev: int) -> EvState:
        e = self._path_manager.find(ev)
        if e is None:
            raise KeyError(ev)
        return e.state

    def ev_states(self) -> dict[int, EvState]:
        return self._path_manager.ev_states()

    def ev_stats(self) -> list[dict[str, Any]]:
        """Per-EV counters (tables, not hot paths)."""
        return self._path_manager.ev_stats()

    def message_key(self, msg_id: int) -> int:
        return message_key(self.host, self.qpn, msg_id, self.key_seed)

    def expected_checksum(self, msg_id: int, length: int, payload: bytes | None = None) -> int:
        """The checksum the peer must report for this QP's message ``msg_id``."""
        if payload is not None:
            return payload_sha256(payload)
        return expected_checksum(self.message_key(msg_id), length, self.mtu)

    # ================================================================== the contract
    def post_write(self, now: int, msg_id: int, length: int, *, payload: bytes | None = None,
                   imm: int | None = None) -> None:
        """Queue an RDMA WRITE (with immediate when ``imm`` is given) of ``length`` bytes."""
        if length <= 0:
            raise ValueError(f"a WRITE needs at least one byte, got {length}")
        if payload is not None and len(payload) != length:
            raise ValueError(f"payload has {len(payload)} bytes, length says {length}")
        if self.failed:
            self.stats.dropped_after_error += 1
            return
        self._sender.post(Msg(msg_id, length, self.message_key(msg_id), payload, imm, now))
        self._watchdog.arm(now)

    @cython.ccall
    @cython.annotation_typing(True)
    def poll(self, now: cython.longlong, plane: cython.longlong) -> Any:  # Packet | None
        return self._sender.poll(now, plane)

    @cython.ccall
    @cython.annotation_typing(True)
    def receive(self, now: cython.longlong, pkt: Packet) -> None:
        if self.failed:
            self.stats.dropped_after_error += 1
            return
        kind: cython.longlong = pkt.kind
        if kind == _DATA:
            self.bytes_placed += self._receiver.on_data(now, pkt)
        elif kind == _ACK or kind == _NACK:
            self._recovery.on_ack(now, pkt)
        elif kind == _PROBE:
            self._receiver.reply_probe(pkt)
        elif kind == _PROBE_REPLY:
            self._path_manager.on_probe_reply(now, pkt)
        else:
            self.stats.bad_packets += 1

    @cython.ccall
    @cython.annotation_typing(True)
    def next_timer(self) -> Any:  # int | None
        return self._recovery.next_timer()

    @cython.ccall
    @cython.annotation_typing(True)
    def handle_timer(self, now: cython.longlong) -> None:
        self._recovery.handle_timer(now)

    @cython.ccall
    @cython.annotation_typing(True)
    def take_control(self) -> list:  # list[Packet]
        out = self.control
        if out:
            self.control = []
        return out

    # ================================================================== verbs modify
    #: The published attributes ``modify`` may change on a live QP (mrc.h: RTR sets mpr_dest
    #: and max_wimm_dest, RTS sets mpr, max_wimm, timeout and the retry counts).
    MODIFIABLE = ("timeout", "retry_linear_cnt", "retry_exp_cnt", "mpr", "mpr_dest",
                  "max_wimm", "max_wimm_dest")

    def modify(self, **attrs: Any) -> None:
        """Change published QP attributes (``mrc_modify_qp``): the new config takes effect
        for what is sent, timed and tracked from now on."""
        unknown = set(attrs) - set(self.MODIFIABLE)
        if unknown:
            raise ValueError(f"not modifiable on an MRC QP: {sorted(unknown)}")
        cfg = self.config = dataclasses.replace(self.config, **attrs)
        self._watchdog.configure(cfg)
        sender = self._sender
        sender._mpr_psns = cfg.mpr * MPR_UNIT_PSNS
        sender._max_wimm = cfg.max_wimm
        self._receiver._max_ahead = cfg.mpr_dest * MPR_UNIT_PSNS
        self._path_manager.config = cfg

    # ================================================================== operator and NIC
    def deny(self, now: int, which: EvSelector, reason: str = "denied") -> list[int]:
        """Operator drain: the selected EVs go DENIED (never used nor probed until allowed).
        ``which``: EV numbers, or a predicate on ``PathChoice`` (e.g. by plane and T1)."""
        return self._path_manager.deny(now, which, reason)

    def allow(self, now: int, which: EvSelector, *, validate: bool = False,
              reason: str = "allowed") -> list[int]:
        """Clear DENIED on the selected EVs: GOOD at once, or ASSUMED_BAD and probed first
        when ``validate``."""
        return self._path_manager.allow(now, which, validate, reason)

    def port_down(self, now: int, plane: int) -> list[int]:
        """The NIC's own port of ``plane`` lost signal (local knowledge, no evidence needed):
        every GOOD EV of that plane goes ASSUMED_BAD at once and whatever was in flight on
        the plane is resent on the others. Returns the EVs that changed. Nothing is needed
        when the port comes back: the probes get answered and reintegrate the EVs."""
        return self._path_manager.port_down(now, plane)
