"""The kernel runtime: a lab's fabric forwarded by the Linux SRv6 data plane itself.

Where the live runtime moves real datagrams through a user-space model of the fabric, this one
builds the fabric out of the kernel: one network namespace per switch and per host, one veth
pair per link, the uSID plan as seg6local routes, token buckets for link rates, and the lab's
faults done to real interfaces. The unchanged sans-IO QPs run in the hosts. Needs root.

* :mod:`mrc.kernel.netns`: namespaces with a run-specific prefix, entered per thread; a dead
  run's fabric is found by its released lock and removed.
* :mod:`mrc.kernel.rtnl`: the rtnetlink messages the fabric sends (routes, neighbours, links,
  qdiscs, filters), batched per namespace.
* :mod:`mrc.kernel.bpf`: the two eBPF programs Linux lacks behaviours for (the last uSID's
  shift, random loss), written as instructions.
* :mod:`mrc.kernel.fabric`: builds, changes and tears down the fabric
  (:mod:`topology.seg6` says which routes each switch gets, and why).
* :mod:`mrc.kernel.shaping`: one scale factor; token buckets that serialize at link rate.
* :mod:`mrc.kernel.faults`: the simulator's fault primitives on real ports, timed.
* :mod:`mrc.kernel.host`: the live host (and so the one NIC driver) on real veths, a packet
  socket per host.
* :mod:`mrc.kernel.capture`: ``--pcap`` from packet sockets on chosen links.
* :mod:`mrc.kernel.stack`: ``KernelStack``, the shared stack built from these parts, with the
  live runtime's clockwork (``LiveSim`` on an engine of its own) for the lab's schedule; the
  labs layer runs it (``mrc.labs.run.kernel``).

The layer sits between ``mrc.live`` (whose host, clock, clockwork and connections it reuses)
and ``mrc.labs`` (which runs labs on it); ``lint-imports`` holds it there.
"""
