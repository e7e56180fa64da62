"""One honest time scale: a lab's ``[run] time_scale`` on every real-world control timer.

A lab that runs in simulated microseconds cannot wait a real RC local ACK timeout (NCCL's
2^20 x 4.096 us, 4.3 s) or a BGP convergence (about a second). Compressing one of them and not
the others would change who gives up first; so one factor multiplies **all** of them, and
only them:

* RC: the local ACK timeout (``timeout_exp``, so the fixed IBA timer, the cap of the adaptive
  ladder and the retry budget ``(retry_cnt + 1) x timeout``), and every time of the adaptive
  retransmission ladder declared a real-world timer;
* routing: link-down detection and routing convergence (the routed fabric's config);
* MRC: the published QP timeout (``timeout``: the no-progress watchdog and its retries).

Not scaled, because they are not compressed real-world timers but the fabric and mrc-lab's
own microsecond mechanisms, modelled at full speed: link rates and RTTs, serialisation and
queues, DCQCN's and NSCC's congestion-control timers, the responder's ACK coalescing timer,
and MRC's per-EV path timer, loss evidence, probe intervals and reorder window (those react in
tens of microseconds in the real NIC too: docs/fidelity.md).

**Why a verdict survives the factor.** Every timer that decides whether a QP stalls, fails or
recovers is multiplied by the same factor, so their order is unchanged: if detection (1 ms)
comes before RC's retry budget (seconds) in the real world, ``time_scale x`` detection comes
before ``time_scale x`` budget in the lab, and the QP that outlives or outruns another at full
scale does so scaled. What does not scale (RTTs, per-EV timers) is already microseconds, at
least ``1 / time_scale`` times shorter than any scaled timer at full scale; a factor that
brings a scaled timer near them is one the lab should not use (the lab header says which
timers it compresses and by how much). Stall lengths are then reported twice: as simulated
and divided by the factor (the real-world stall they stand for).

Where a config field declares itself a real-world timer: ``knob(..., real_timer=True)`` on
its dataclass field, or its name in the config class's ``REAL_TIMERS`` tuple (a config
without knobs); :func:`mrc.knobs.scale_timers` applies the factor once, where the lab's
configs are built (:mod:`mrc.stack.transport_params`; the routed fabric's config where the
stack is built). Here: the factor reaches the builders, and the summary states it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from mrc.knobs import real_timers, scale_timers
from mrc.labs.schema.lab import Lab, TransportSpec
from mrc.stack.transport_params import TIME_SCALE_KEY
from mrc.transport.mrc.config import MrcConfig
from mrc.transport.rc.config import RcConfig

#: The configs whose real-world timers the summary lists (transport kind -> config class).
CONFIGS: dict[str, type] = {"mrc": MrcConfig, "rc": RcConfig}
#: Configs of the run beside the transports' whose timers the factor scales (listed in the
#: summary whenever it is not 1): name -> config class (the routed fabric's joins here).
RUN_CONFIGS: dict[str, type] = {}


def scaled_specs(lab: Lab, specs: Sequence[TransportSpec]) -> list[TransportSpec]:
    """``specs`` with the lab's time scale in their parameters (unchanged at 1), for the
    config builders to apply (:mod:`mrc.stack.transport_params`)."""
    factor = lab.run.time_scale
    if factor == 1:
        return list(specs)
    return [dataclasses.replace(s, params={**s.params, TIME_SCALE_KEY: factor}) for s in specs]


def summary_block(lab: Lab, kinds: Iterable[str]) -> dict[str, Any]:
    """summary.json's ``time_scale``: the factor and, per transport kind that ran
    (``kinds``), which config fields it multiplied (none at 1)."""
    factor = lab.run.time_scale
    ran = sorted(set(kinds) & set(CONFIGS))
    scaled = {kind: list(real_timers(CONFIGS[kind])) for kind in ran}
    scaled.update({name: list(real_timers(cls)) for name, cls in RUN_CONFIGS.items()})
    return {"factor": factor, "scaled": scaled if factor != 1 else {}}


def scaled(lab: Lab, config: Any) -> Any:
    """``config`` (a dataclass with declared real-world timers: the routed fabric's, say)
    with the lab's factor applied, for a runtime to build its stack with."""
    return scale_timers(config, lab.run.time_scale)


def real_world_us(simulated_us: float | None, factor: float) -> float | None:
    """A simulated time of the scaled timers' world, in the real world's: divided by the
    factor (None stays None)."""
    return None if simulated_us is None else simulated_us / factor
