"""What the labs layer runs a transport on: :class:`~mrc.stack.stack.Stack` (and the
simulator's ``SimStack``), its connections, mixed runs and the builders that turn a lab's
parameters and the fabric into transport configs, EV sets and RC paths.

* :mod:`mrc.stack.stack`: ``Stack``, ``SimStack``: connections, drains, event log, goodput.
* :mod:`mrc.stack.connections`: an application's WRITEs over MRC or RC, with verbs
  completion semantics.
* :mod:`mrc.stack.mixed`: several transports on one simulated fabric at once.
* :mod:`mrc.stack.recorder`: per-bin goodput and counters of one transport's run.
* :mod:`mrc.stack.transport_params`: ``[transport.NAME]`` lab keys -> transport configs.
* :mod:`mrc.stack.evset`, :mod:`mrc.stack.rc_connection`, :mod:`mrc.stack.qpn`: what a
  transport gets from the fabric (EV sets, RC's ECMP-pinned paths, seeded QPNs).
"""
