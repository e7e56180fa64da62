"""Time dilation: the one factor that maps modelled picoseconds to wall-clock seconds.

Python cannot move 100 Gb/s of 4 KB datagrams, but it can move 100 Mb/s. Running the whole
model ``dilation`` times slower keeps every ratio the dynamics depend on (serialization vs
propagation vs timers vs fault times) while the wall-clock load drops by the same factor. So
nothing in the live runtime is scaled by hand: transports, the fabric and the fault schedule
all keep their modelled units (integer picoseconds, Gb/s), and only this clock converts.
With ``dilation = 1000`` a 100 Gb/s link carries 100 Mb/s of wall-clock traffic, a 1 us RTO
lasts 1 ms, and a fault at 2,000 us fires 2 s after the start.

Wall time is ``time.monotonic`` (the asyncio loop's clock), which is system-wide on Linux, so a
fabric in another process can share the origin.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from mrc.units import PS_PER_S


class Clock:
    """Modelled time (integer ps since ``origin``) from a wall clock slowed by ``dilation``."""

    __slots__ = ("dilation", "origin", "_time", "_ps_per_wall_s", "_wall_s_per_ps")

    def __init__(self, dilation: float = 1000.0, origin: float | None = None,
                 time_fn: Callable[[], float] = time.monotonic) -> None:
        if not dilation > 0:
            raise ValueError(f"dilation must be positive, got {dilation!r}")
        self.dilation = float(dilation)
        self._time = time_fn
        self.origin = time_fn() if origin is None else float(origin)
        self._ps_per_wall_s = PS_PER_S / self.dilation
        self._wall_s_per_ps = self.dilation / PS_PER_S

    def restart(self, origin: float | None = None) -> None:
        """Make modelled time zero now (or at wall time ``origin``)."""
        self.origin = self._time() if origin is None else float(origin)

    def now_ps(self) -> int:
        """Modelled time now, in picoseconds (never negative)."""
        t = self._time() - self.origin
        return int(t * self._ps_per_wall_s) if t > 0 else 0

    def wall_at(self, time_ps: int) -> float:
        """The wall-clock instant (same clock as ``time_fn``) of modelled time ``time_ps``."""
        return self.origin + time_ps * self._wall_s_per_ps

    def wall_seconds(self, duration_ps: int) -> float:
        """Wall-clock length of a modelled duration."""
        return duration_ps * self._wall_s_per_ps

    def model_ps(self, wall_seconds: float) -> int:
        """Modelled length of a wall-clock duration."""
        return int(wall_seconds * self._ps_per_wall_s)

    def wall_gbps(self, model_gbps: float) -> float:
        """What a modelled rate amounts to on the wall clock (100 Gb/s at x1000: 0.1)."""
        return model_gbps / self.dilation

    def describe(self) -> dict[str, float]:
        """The scaling, for summaries: reports give both wall and modelled units."""
        return {"dilation": self.dilation, "wall_s_per_model_us": self.dilation / 1e6}
