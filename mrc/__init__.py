"""mrc-lab: MRC multipath reliable transport, its wire format, a packet simulator, a live
runtime and the failure-injection labs engine."""

__version__ = "0.1.0"

# The optional compiled build of the simulator's hot modules (see mrc/_accel.py): used only
# when it was built from exactly these sources; otherwise everything is pure Python.
from mrc import _accel  # noqa: E402

_accel.activate()
