"""mrc-lab: MRC multipath reliable transport, its wire format, a packet simulator, a live
runtime and the failure-injection labs engine."""

__version__ = "0.1.0"
