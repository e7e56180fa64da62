"""libmrc's application objects (``mrc.h``): context, completion queue, queue pair.

They wrap the sans-IO MRC QP (:class:`mrc.transport.mrc.MrcQueuePair`) with the verbs life
the header and ``examples/mrc_qp.md`` describe, driven by a
:class:`Provider` (in libibverbs' terms: the driver behind the objects; here the simulated
fabric, :class:`mrc.verbs.fabric.Fabric`):

* a QP is created in ``RST`` and moved ``INIT`` (EV and CC profile ids, which must be ONLINE
  on the host's controller) -> ``RTR`` (the peer: ``dest``, ``dest_qp_num``; ``mpr_dest``,
  ``max_wimm_dest``; from here it answers its peer and receive WRs may be posted) -> ``RTS``
  (``mpr``, ``max_wimm``, ``timeout``, ``retry_linear_cnt``, ``retry_exp_cnt``; from here
  WRITEs may be posted); ``RTS`` -> ``RTS`` changes attributes; a transport error moves it to
  ``ERR`` and flushes every outstanding WR (the first with ``RETRY_EXC_ERR``, the rest
  ``WR_FLUSH_ERR``). ``RST`` is reachable from any state (the transport QP is destroyed);
* ``post_send`` takes ``RDMA_WRITE`` and ``RDMA_WRITE_WITH_IMM`` only (no READ, SEND or
  atomics) and at most ``max_send_wr`` outstanding; a WRITE's CQE (``sq_sig_all`` or a
  signaled WR) comes when every byte is acknowledged;
* a WRITE with immediate consumes a posted receive WR at the responder when the whole
  message is placed (``RECV_RDMA_WITH_IMM`` completion); MRC has no RNR, so one that finds no
  receive WR is a QP error (the requester's ``max_wimm`` must never exceed what the
  responder posted);
* EV state changes go to the host controller's EV event CQs (:mod:`mrc.verbs.control`).

The older QP-level EV API (``mrc_qp_attr.ev_array``, ``max_ev_per_qp``,
``min_active_ev_per_qp``, ``ev_state_monitor_mask`` of the 2024-25 headers) is the same
model reached through a profile: the QP takes its EVs from the profile at RTR.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from mrc.ev.profile import EvProfile
from mrc.transport.base import (
    EvState,
    EvStateChanged,
    MessageCompleted,
    PathChoice,
    QpError,
    SendCompleted,
    TransportEvent,
)
from mrc.transport.mrc import MrcQueuePair
from mrc.transport.mrc.config import MrcConfig
from mrc.verbs.control import Controller, VerbsError
from topology import evs as fabric_evs
from topology.spec import FabricSpec


class Provider(Protocol):
    """What a context and its QPs need of the fabric that runs them."""

    @property
    def now(self) -> int:
        """The fabric's time, integer picoseconds."""
        ...

    @property
    def spec(self) -> FabricSpec: ...

    @property
    def seed(self) -> int:
        """The seed of the fabric's EV paths and keys."""
        ...

    def host_index(self, host: int | str) -> int: ...

    def allocate_qpn(self) -> int:
        """A QP number no other QP of the fabric holds."""
        ...

    def controller(self, host: int | str) -> Controller: ...

    def attach(self, qp: QueuePair, *, send: bool) -> None:
        """Put ``qp``'s transport QP on its NIC (sending on every plane when ``send``)."""
        ...

    def enable_send(self, qp: QueuePair) -> None:
        """:meth:`attach` sending."""
        ...

    def service(self, qp: QueuePair) -> None:
        """An API call changed ``qp``: let its NIC act on it."""
        ...

    def detach(self, qp: QueuePair) -> None:
        """Take ``qp``'s transport QP off its NIC."""
        ...

RST, INIT, RTR, RTS, ERR = "RST", "INIT", "RTR", "RTS", "ERR"
WR_RDMA_WRITE = "RDMA_WRITE"
WR_RDMA_WRITE_WITH_IMM = "RDMA_WRITE_WITH_IMM"
WC_RECV_RDMA_WITH_IMM = "RECV_RDMA_WITH_IMM"
WC_SUCCESS, WC_RETRY_EXC_ERR, WC_WR_FLUSH_ERR = "SUCCESS", "RETRY_EXC_ERR", "WR_FLUSH_ERR"
_NEXT = {RST: (INIT,), INIT: (RTR,), RTR: (RTS,), RTS: (RTS,), ERR: ()}
_RTR_ATTRS = ("mpr_dest", "max_wimm_dest")
_RTS_ATTRS = ("mpr", "max_wimm", "timeout", "retry_linear_cnt", "retry_exp_cnt")


@dataclass(frozen=True)
class DeviceAttr:
    """``mrc_device_attr`` of the simulated device."""

    mrc_protocol_version: int = 1
    max_wimm: int = 65535
    max_wimm_dest: int = 65535
    max_mpr: int = 255
    mpr_resolution: int = 1
    max_qp_hint: int = 0
    cap: tuple[str, ...] = ("TRIM_NACK",)


@dataclass(frozen=True)
class SendWr:
    """A send work request: ``length`` bytes (simulated contents) or ``payload``."""

    wr_id: int
    opcode: str = WR_RDMA_WRITE
    length: int = 0
    payload: bytes | None = None
    imm_data: int | None = None
    signaled: bool = True


@dataclass(frozen=True)
class RecvWr:
    wr_id: int


@dataclass(frozen=True)
class WorkCompletion:
    """``ibv_wc``: the WR it completes, status, opcode, bytes, immediate, and when; a send
    completion also says how long it took from its post (``latency_ps``)."""

    wr_id: int
    status: str
    opcode: str
    byte_len: int
    qp_num: int
    time_ps: int
    imm_data: int | None = None
    latency_ps: int | None = None


class CompletionQueue:
    """``mrc_cq``: completions in the order they happen, ``cqe`` at most (an overrun is an
    error, as in verbs)."""

    def __init__(self, cqe: int) -> None:
        if cqe < 1:
            raise VerbsError("EINVAL", "a CQ needs at least one entry")
        self.cqe = cqe
        self._q: deque[WorkCompletion] = deque()
        self.overrun = False

    def push(self, wc: WorkCompletion) -> None:
        if len(self._q) >= self.cqe:
            self.overrun = True
            raise VerbsError("EOVERFLOW", f"CQ overrun ({self.cqe} entries): poll it")
        self._q.append(wc)

    def poll(self, num_entries: int) -> list[WorkCompletion]:
        """``mrc_poll_cq``: up to ``num_entries`` completions, oldest first."""
        out: list[WorkCompletion] = []
        while self._q and len(out) < num_entries:
            out.append(self._q.popleft())
        return out


@dataclass
class _Posted:
    wr: SendWr
    posted_ps: int
    length: int


class QueuePair:
    """``mrc_qp`` (see the module docstring)."""

    def __init__(self, context: Context, *, send_cq: CompletionQueue,
                 recv_cq: CompletionQueue, max_send_wr: int = 128, max_recv_wr: int = 128,
                 sq_sig_all: bool = True) -> None:
        self.context = context
        self.fabric = context.fabric
        self.host = context.host
        self.send_cq = send_cq
        self.recv_cq = recv_cq
        self.max_send_wr = max_send_wr
        self.max_recv_wr = max_recv_wr
        self.sq_sig_all = sq_sig_all
        self.qp_num = self.fabric.allocate_qpn()
        self.state = RST
        self.attrs: dict[str, Any] = {}
        self.transport: MrcQueuePair | None = None
        self.error_reason: str | None = None
        self._sends: dict[int, _Posted] = {}
        self._recvs: deque[RecvWr] = deque()
        self._next_msg = 1

    # ------------------------------------------------------------------ modify / query
    def modify(self, state: str | None = None, **attrs: Any) -> None:
        """``mrc_modify_qp``: move to ``state`` with the attributes that transition needs,
        or change attributes in place (RTS -> RTS)."""
        target = self.state if state is None else state
        if target == RST:
            self._reset()
            return
        if target == ERR:
            self._error(self.fabric.now, "moved to ERR by the application")
            return
        if target != self.state and target not in _NEXT[self.state]:
            raise VerbsError("EINVAL", f"QP {self.qp_num}: {self.state} -> {target} is not a "
                             "transition of RST -> INIT -> RTR -> RTS")
        if target == INIT:
            for key in ("ev_profile_id", "cc_profile_id"):
                if key not in attrs:
                    raise VerbsError("EINVAL", f"RST -> INIT needs {key}")
            ctl = self.fabric.controller(self.host)
            ctl.online_ev_profile(attrs["ev_profile_id"])
            ctl.online_cc_profile(attrs["cc_profile_id"])
            self.attrs.update(attrs)
            ctl.attach(attrs["ev_profile_id"], self)
        elif target == RTR and self.state == INIT:
            for key in ("dest", "dest_qp_num"):
                if key not in attrs:
                    raise VerbsError("EINVAL", f"INIT -> RTR needs {key}")
            self.attrs.update(attrs)
            self._create_transport()
        elif target == RTS and self.state == RTR:
            self.attrs.update(attrs)
            self._apply({k: v for k, v in attrs.items() if k in _RTS_ATTRS})
            self.fabric.enable_send(self)
        else:  # RTS -> RTS
            bad = set(attrs) - set(_RTS_ATTRS) - set(_RTR_ATTRS)
            if bad:
                raise VerbsError("EINVAL", f"not modifiable in RTS: {sorted(bad)}")
            self.attrs.update(attrs)
            self._apply(attrs)
        self.state = target

    def query(self) -> dict[str, Any]:
        """``mrc_query_qp``: state and every attribute as the QP holds it."""
        out: dict[str, Any] = {"qp_state": self.state, "qp_num": self.qp_num, **self.attrs}
        if self.transport is not None:
            cfg = self.transport.config
            for key in (*_RTR_ATTRS, *_RTS_ATTRS):
                out[key] = getattr(cfg, key)
            out["ev_count"] = len(self.transport.paths)
        return out

    # ------------------------------------------------------------------ work requests
    def post_send(self, wr: SendWr) -> None:
        """``mrc_post_send``: an RDMA WRITE (with immediate) in RTS."""
        if wr.opcode not in (WR_RDMA_WRITE, WR_RDMA_WRITE_WITH_IMM):
            raise VerbsError("EINVAL", f"{wr.opcode}: MRC supports RDMA WRITE and WRITE with "
                             "immediate only")
        if self.state != RTS or self.transport is None:
            raise VerbsError("EINVAL", f"post_send needs RTS (the QP is {self.state})")
        if len(self._sends) >= self.max_send_wr:
            raise VerbsError("ENOMEM", f"send queue full ({self.max_send_wr} WRs outstanding)")
        imm = wr.imm_data if wr.opcode == WR_RDMA_WRITE_WITH_IMM else None
        if wr.opcode == WR_RDMA_WRITE_WITH_IMM and imm is None:
            raise VerbsError("EINVAL", "a WRITE with immediate needs imm_data")
        length = len(wr.payload) if wr.payload is not None else wr.length
        msg_id = self._next_msg
        self._next_msg += 1
        now = self.fabric.now
        self._sends[msg_id] = _Posted(wr, now, length)
        self.transport.post_write(now, msg_id, length, payload=wr.payload, imm=imm)
        self.fabric.service(self)

    def post_recv(self, wr: RecvWr) -> None:
        """``mrc_post_recv``: a receive WR for an incoming WRITE with immediate."""
        if self.state in (RST, ERR):
            raise VerbsError("EINVAL", f"post_recv in {self.state}")
        if len(self._recvs) >= self.max_recv_wr:
            raise VerbsError("ENOMEM", f"receive queue full ({self.max_recv_wr} WRs)")
        self._recvs.append(wr)

    # ------------------------------------------------------------------ EV plumbing
    def transport_ev_states(self) -> dict[int, EvState]:
        return {} if self.transport is None else self.transport.ev_states()

    def set_ev_state(self, match: Any, state: str) -> int:
        """The controller changed EVs of this QP's profile (GOOD or DENIED)."""
        qp = self.transport
        if qp is None:
            return 0
        now = self.fabric.now
        done = qp.deny(now, match) if state == "DENIED" else qp.allow(now, match)
        self.fabric.service(self)
        return len(done)

    # ------------------------------------------------------------------ driver events
    def on_event(self, event: TransportEvent, qp: Any) -> None:
        """An event of the transport QP (the fabric's NIC hands them over)."""
        if isinstance(event, SendCompleted):
            posted = self._sends.pop(event.msg_id, None)
            if posted is not None and (self.sq_sig_all or posted.wr.signaled):
                self.send_cq.push(WorkCompletion(
                    posted.wr.wr_id, WC_SUCCESS, posted.wr.opcode, posted.length, self.qp_num,
                    event.time_ps, latency_ps=event.time_ps - posted.posted_ps))
        elif isinstance(event, MessageCompleted):
            if event.imm is None:
                return  # a plain WRITE completes nothing at the responder
            if not self._recvs:
                self._error(event.time_ps, "a WRITE with immediate arrived with no receive "
                            "WR posted (MRC has no RNR)")
                return
            wr = self._recvs.popleft()
            self.recv_cq.push(WorkCompletion(wr.wr_id, WC_SUCCESS, WC_RECV_RDMA_WITH_IMM,
                                             event.bytes, self.qp_num, event.time_ps,
                                             imm_data=event.imm))
        elif isinstance(event, EvStateChanged):
            self.fabric.controller(self.host).ev_event(
                int(self.attrs["ev_profile_id"]), self.qp_num, event.time_ps, event.ev,
                event.port, event.new)
        elif isinstance(event, QpError):
            self._error(event.time_ps, event.reason)

    # ------------------------------------------------------------------ internals
    def _profile(self) -> EvProfile:
        return self.fabric.controller(self.host).online_ev_profile(int(self.attrs["ev_profile_id"]))

    def _create_transport(self) -> None:
        fab = self.fabric
        spec = fab.spec
        dest = fab.host_index(self.attrs["dest"])
        if dest == self.host:
            raise VerbsError("EINVAL", "a QP's peer is another host")
        profile = self._profile()
        cc = fab.controller(self.host).online_cc_profile(int(self.attrs["cc_profile_id"]))
        rtr = {k: self.attrs[k] for k in _RTR_ATTRS if k in self.attrs}
        config = MrcConfig(cc=cc, ev_count=profile.ev_count, ev_min_active=profile.min_active,
                           **rtr)
        try:
            # the generation order depends on the unordered pair: the peer, given the same
            # profile, sprays the same EV values, so this set is also the map of replies
            own = fabric_evs.ev_paths(spec, self.host, dest, profile, fab.seed)
        except fabric_evs.EvPathError as exc:
            raise VerbsError("EINVAL", str(exc)) from None
        self.transport = MrcQueuePair(
            self.qp_num, self.host, dest, int(self.attrs["dest_qp_num"]), spec.mtu_bytes,
            [PathChoice(p.ev, p.plane, p.t1, p.address) for p in own],
            config=config, key_seed=fab.seed)
        fab.attach(self, send=False)

    def _apply(self, attrs: dict[str, Any]) -> None:
        if self.transport is None or not attrs:
            return
        try:
            self.transport.modify(**attrs)
        except (TypeError, ValueError) as exc:
            raise VerbsError("EINVAL", str(exc)) from None

    def _error(self, now: int, reason: str) -> None:
        if self.state == ERR:
            return
        self.state = ERR
        self.error_reason = reason
        first = True
        for posted in list(self._sends.values()):
            self.send_cq.push(WorkCompletion(
                posted.wr.wr_id, WC_RETRY_EXC_ERR if first else WC_WR_FLUSH_ERR,
                posted.wr.opcode, 0, self.qp_num, now))
            first = False
        self._sends.clear()
        for wr in self._recvs:
            self.recv_cq.push(WorkCompletion(wr.wr_id, WC_WR_FLUSH_ERR, WC_RECV_RDMA_WITH_IMM,
                                             0, self.qp_num, now))
        self._recvs.clear()
        if self.transport is not None:
            self.fabric.detach(self)

    def _reset(self) -> None:
        if self.transport is not None:
            self.fabric.detach(self)
            self.transport = None
        if "ev_profile_id" in self.attrs:
            self.fabric.controller(self.host).detach(int(self.attrs["ev_profile_id"]), self)
        self.attrs.clear()
        self._sends.clear()
        self._recvs.clear()
        self.state = RST


class Context:
    """``mrc_context`` of one host's NIC: the parent of its CQs and QPs."""

    def __init__(self, fabric: Provider, host: int) -> None:
        self.fabric = fabric
        self.host = host
        self.qps: list[QueuePair] = []

    def query_device(self) -> DeviceAttr:
        """``mrc_query_device``."""
        return DeviceAttr()

    def create_cq(self, cqe: int) -> CompletionQueue:
        """``mrc_create_cq``."""
        return CompletionQueue(cqe)

    def create_qp(self, *, send_cq: CompletionQueue, recv_cq: CompletionQueue,
                  max_send_wr: int = 128, max_recv_wr: int = 128,
                  sq_sig_all: bool = True) -> QueuePair:
        """``mrc_create_qp``: a QP in RST."""
        qp = QueuePair(self, send_cq=send_cq, recv_cq=recv_cq, max_send_wr=max_send_wr,
                       max_recv_wr=max_recv_wr, sq_sig_all=sq_sig_all)
        self.qps.append(qp)
        return qp

    def destroy_qp(self, qp: QueuePair) -> None:
        """``mrc_destroy_qp``."""
        qp.modify(RST)
        self.qps.remove(qp)
