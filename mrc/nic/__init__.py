"""The NIC: what a NIC does for its queue pairs, the same in every runtime.

* :mod:`mrc.nic.driver`: :class:`~mrc.nic.driver.NicDriver`, registration, per-plane pulls,
  timers, port signals and the recorder's hooks, with a :class:`~mrc.nic.context.QpContext`
  per QP.
* :mod:`mrc.nic.runtime`: what a runtime hands the driver (its ports, its clock, its
  recorder), as small base classes: the simulator's (:mod:`mrc.sim.nic`), the live host's
  (:mod:`mrc.live.host_nic`) and, through the live host, the kernel runtime's.
"""
