"""mrc-lab: MRC multipath reliable transport, its wire format, a packet simulator, a live
runtime and the failure-injection labs engine."""

__version__ = "0.1.0"

# The simulator's per-packet modules may be installed compiled (see mrc/_build.py): decide,
# before any of them is imported, whether this process runs them compiled or from source.
from mrc import _build  # noqa: E402

_build.select()
