"""The live runtime: the same sans-IO transports moving real packets through real sockets.

* :mod:`mrc.live.clock`: one time-dilation factor maps modelled picoseconds to wall seconds.
* :mod:`mrc.live.fabric`: the user-space SRv6 fabric: the simulator's own network
  (shift-and-forward, link rate, delay, queues with trimming and ECN, faults) on the packets'
  outer headers; :mod:`mrc.live.fabric_server` runs it on a UDP socket against the clock.
* :mod:`mrc.live.gso`: Linux UDP segmentation offload, so hosts and fabric send runs of
  datagrams in one call; :mod:`mrc.live.udp`: binding, burst reads, kernel drop counts.
* :mod:`mrc.live.host`: a host driving unchanged QP objects through the simulator's NIC
  driver (``mrc.nic.driver``) on asyncio, one asyncio-dgram socket each.
* :mod:`mrc.live.stack`: ``LiveStack``, the stack the labs runner drives (the labs layer's
  ``mrc.labs.run.live`` runs a lab live: what ``mrc-lab run LAB --runtime live`` calls).
"""
