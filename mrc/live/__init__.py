"""The live runtime: the same sans-IO transports moving real packets through real sockets.

* :mod:`mrc.live.clock`: one time-dilation factor maps modelled picoseconds to wall seconds.
* :mod:`mrc.live.fabric`: the user-space SRv6 fabric (shift-and-forward on packet bytes,
  link rate, delay, queues with trimming and ECN, faults) on a UDP socket.
* :mod:`mrc.live.host`: a host driving unchanged QP objects with asyncio, one asyncio-dgram
  socket each.
* :mod:`mrc.live.runner`: ``LiveStack`` for the labs runner and ``run_live`` (what
  ``mrc-lab run LAB --runtime live`` calls).
"""
