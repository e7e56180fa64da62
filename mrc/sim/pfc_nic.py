"""A NIC's port on a PFC fabric: ``PfcNicPort``, which obeys PAUSE (the switch's port is
:mod:`mrc.sim.pfc_ports`). The mechanism, its model and its timing are described in
:mod:`mrc.sim.pfc`, which holds what both ports share (PAUSE frames, ingress accounting,
being paused, the watchdog).
"""

# mypy: disable-error-code="misc"
# (the pause state is set through the PauseState mixin, whose fields are declared here)
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mrc.nic.driver import NicDriver
from mrc.packet import DATA, PAUSE, Packet
from mrc.sim.host import Host, NicPort
from mrc.sim.pfc import PauseFrame, PauseState, PfcIngress
from mrc.sim.pfc_ports import PfcPort
from mrc.units import PS_PER_US

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if TYPE_CHECKING:
    from mrc.sim.network import Network
    from mrc.sim.switch import Switch

# typed copies (compiled, C integers)
_DATA = cython.declare(cython.longlong, DATA)
_PAUSE = cython.declare(cython.longlong, PAUSE)


@cython.cclass
class PfcNicPort(NicPort, PauseState):
    """A NIC port on a PFC fabric: it stops polling the QPs of its paused priority (the NIC
    driver reads ``paused_priority``) and sends the PAUSE frames of its host's receive side
    ahead of everything it has queued. An agent that hands it a packet of the paused priority
    anyway (a plain traffic source) has that packet parked until the pause ends, and is not
    asked for more meanwhile: the wire never carries it while paused."""

    # What every packet-hop reads first (as in OutPort), then the rest of PauseState's state
    ingress: PfcIngress
    _parked: Packet | None
    paused: cython.bint
    storm: cython.bint
    pfc_prio: cython.longlong
    reverse: Any  # OutPort
    quantum_ps: cython.longlong
    pause_since: cython.longlong
    pause_gen: cython.longlong
    pause_until: cython.longlong
    pause_received: cython.longlong
    pause_sent: cython.longlong
    paused_ps: cython.longlong
    watchdog_ps: cython.longlong
    restore_ps: cython.longlong
    storms: cython.longlong
    last_pause_rx: cython.longlong
    _expire_cb: Callable[[int], None]
    _pause_cb: Callable[[PauseFrame], None]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, net: Network, name: str, host: Host, dst: Switch, plane: int, *,
                 far_latency_ps: int) -> None:
        super().__init__(net, name, host, dst, plane, far_latency_ps=far_latency_ps)
        self._init_pause(net.spec)
        self._pause_cb = self._pause_arrive
        self._parked = None

    def _pause_begin(self, now: int) -> None:
        self.paused = True
        self.paused_priority = self.pfc_prio

    @cython.ccall
    @cython.annotation_typing(True)
    def _arrive_switch(self, pkt: Packet) -> None:
        """``OutPort._arrive_switch`` for a NIC port (whose departures need no catching up),
        telling the T0's egress port which ingress the packet came through."""
        port: PfcPort
        if pkt.hop_epoch != self.epoch:
            self._lost(pkt)
            return
        now: cython.longlong = self.sim.now
        self.delivered += 1
        if self._tap is not None:
            self._tap(now, self.name, pkt)
        port = self._far.forward(pkt)  # type: ignore[union-attr]
        if port is not None:
            port.send_from(pkt, self.ingress)  # type: ignore[union-attr]

    def _pause_end(self, now: int) -> None:
        self.paused = False
        self.paused_priority = -1
        self.kick()

    def _flush_lossless(self, reason: str) -> int:
        return 0  # a NIC holds no lossless queue: its QPs keep their own data

    def send_pause(self, frame: PauseFrame) -> None:
        if not self.up:
            return
        self.pause_sent += 1
        self.hq.appendleft(frame)
        self._hqb += frame.size
        if not self._pending:
            self._next(self.sim.now)

    @cython.ccall
    @cython.annotation_typing(True)
    def _next(self, now: cython.longlong) -> None:
        """``NicPort._next`` with PAUSE frames (``_transmit_frame``) and a parked packet."""
        pkt: Packet | None
        if self._hqb:
            pkt = self.hq.popleft()
            self._hqb -= pkt.size
        elif self._parked is not None and not self.paused:
            pkt = self._parked
            self._parked = None
        else:
            host: Host = self.host
            nic: NicDriver | None = host.nic
            agent = host.agent
            pkt = None
            if nic is not None and self._parked is None:
                pkt = nic.pull(now, self.plane, self.paused_priority)
            elif agent is not None and self._parked is None:
                pkt = agent.pull(now, self.plane)
                if pkt is not None and pkt.prio == self.paused_priority and pkt.kind == _DATA:
                    self._parked = pkt  # the agent ignored the pause: hold it back
                    pkt = None
            if pkt is None:
                self._pending = False
                return
        self._pending = True
        end: cython.longlong = (self._transmit_frame(pkt, now) if pkt.kind == _PAUSE
                                else self._transmit(pkt, now))
        self.busy_until = end
        self.sim.schedule(end, self._tx_done_cb, self.epoch)

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def set_down(self) -> cython.longlong:
        self._stop_pause()
        self.paused_priority = -1
        if self._parked is not None:
            self._drop(self._parked, "down")
            self._parked = None
        self.ingress.reset()
        return NicPort.set_down(self)  # (explicit: the compiled build has no super() here)

    def stats(self) -> dict[str, object]:
        row = super().stats()
        sent, received, paused_ps, storms = self.pfc_counters()
        row.update({"pause_sent": sent, "pause_received": received,
                    "paused_us": paused_ps / PS_PER_US,
                    "ingress_peak_bytes": self.ingress.peak})
        return row
