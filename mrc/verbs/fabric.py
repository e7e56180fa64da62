"""The driver under :mod:`mrc.verbs`: a simulated fabric whose hosts' NICs run verbs QPs.

A :class:`Fabric` is one :class:`mrc.stack.stack.SimStack` (simulator, network, a NIC per host)
seen through libmrc: ``open_device(host)`` gives an application context
(:class:`mrc.verbs.objects.Context`), ``controller(host)`` the host's controller
(:class:`mrc.verbs.control.Controller`). Time moves only when asked (``run_for_us``,
``run_until_ps``), so a notebook or a test scripts a QP's life step by step, exactly.
Faults are the simulator's primitives (``fault``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mrc.sim import faults as sim_faults
from mrc.stack.stack import SimStack
from mrc.transport.mrc.config import CcConfig
from mrc.units import PS_PER_US
from mrc.verbs.control import Controller, VerbsError
from mrc.verbs.objects import Context
from topology import names
from topology.spec import FabricSpec, preset

if TYPE_CHECKING:
    from mrc.verbs.objects import QueuePair


class Fabric:
    """A simulated fabric driving verbs QPs (see the module docstring)."""

    def __init__(self, fabric: str | FabricSpec = "lab-small", *, seed: int = 0) -> None:
        self.spec = preset(fabric) if isinstance(fabric, str) else fabric
        self.seed = seed
        self.stack = SimStack(self.spec, seed, transport_name="verbs")
        self._controllers: dict[int, Controller] = {}

    # ------------------------------------------------------------------ objects
    def host_index(self, host: int | str) -> int:
        if isinstance(host, int) and not isinstance(host, bool):
            if not 0 <= host < self.spec.hosts:
                raise VerbsError("EINVAL", f"no host {host}")
            return host
        try:
            element = names.resolve(self.spec, str(host))
        except names.UnknownElementError as exc:
            raise VerbsError("EINVAL", str(exc)) from None
        if element.kind != names.HOST:
            raise VerbsError("EINVAL", f"{host!r} is not a host")
        return int(element.index)  # type: ignore[arg-type]

    def open_device(self, host: int | str) -> Context:
        """``mrc_create_context`` on ``host``'s NIC."""
        return Context(self, self.host_index(host))

    def controller(self, host: int | str) -> Controller:
        """The controller context of ``host``'s NIC (one per host)."""
        index = self.host_index(host)
        ctl = self._controllers.get(index)
        if ctl is None:
            ctl = self._controllers[index] = Controller(index)
        return ctl

    def default_cc(self, algorithm: str = "uet-1.0-nscc") -> CcConfig:
        """A CC configuration sized for this fabric (its NIC rate and base RTT)."""
        return CcConfig(algorithm=algorithm, line_rate_gbps=self.spec.nic_gbps,
                        base_rtt=round(self.spec.base_rtt_ps() / 1000),
                        mtu_bytes=self.spec.mtu_bytes)

    # ------------------------------------------------------------------ time and faults
    @property
    def now(self) -> int:
        """Simulated time, integer picoseconds."""
        return self.stack.sim.now

    def run_until_ps(self, time_ps: int) -> int:
        self.stack.sim.run(time_ps)
        return self.now

    def run_for_us(self, us: float) -> int:
        return self.run_until_ps(self.now + int(round(us * PS_PER_US)))

    def fault(self, action: str, target: str, **params: Any) -> dict[str, Any]:
        """Apply an ``mrc.sim.faults`` primitive now (``switch_down``, ``link_down``, ...)."""
        return dict(sim_faults.apply(self.stack.net, action, target, **params).effect)

    # ------------------------------------------------------------------ NIC plumbing
    def allocate_qpn(self) -> int:
        return self.stack.allocate_qpn()

    def attach(self, qp: QueuePair, *, send: bool) -> None:
        """Put ``qp``'s transport QP on its NIC (sending on every plane when ``send``)."""
        assert qp.transport is not None
        nic = self.stack.nics[qp.host]
        if nic.holds(qp.transport):  # type: ignore[arg-type]
            nic.remove(qp.transport)  # type: ignore[arg-type]
        self.stack.register(qp, qp.transport, range(self.spec.planes) if send else ())  # type: ignore[arg-type]
        self.service(qp)

    def enable_send(self, qp: QueuePair) -> None:
        self.attach(qp, send=True)

    def detach(self, qp: QueuePair) -> None:
        if qp.transport is not None:
            self.stack.nics[qp.host].remove(qp.transport)  # type: ignore[arg-type]

    def service(self, qp: QueuePair) -> None:
        """After an API call changed ``qp``: send its control packets, arm its timer, wake
        its ports."""
        if qp.transport is not None and self.stack.nics[qp.host].holds(qp.transport):  # type: ignore[arg-type]
            self.stack.nics[qp.host].poke(qp.transport)  # type: ignore[arg-type]
