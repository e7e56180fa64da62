"""``[routing]``: how RoCE RC's routed fabric repairs itself (``mrc.sim.routing``).

MRC's static SRv6 never consults routing, so these keys change RC's runs only (and a mixed
run's RC traffic). The defaults are real-world times (hardware member removal 1 ms, BGP
convergence 1 s: ``mrc.sim.routing`` names the sources); a lab that compresses RC's timers
scales these with them, and says so in its header.
"""

from __future__ import annotations

from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.checks import check_keys, check_table
from mrc.labs.schema.fields import Field, field_map
from mrc.sim.routing import (
    DEFAULT_LINK_DOWN_DETECT_US,
    DEFAULT_ROUTING_CONVERGENCE_US,
    ECMP_MODES,
    RoutingConfig,
)

#: Longest time a lab may give either (1,000 s, the longest run).
MAX_US = 1e9

FIELDS = (
    Field("ecmp", "string", "how a switch rehashes when its group changes: resilient (a fixed "
          "bucket table: a removal moves only the failed member's flows) or plain (hash mod "
          "live members: a removal moves most flows)", choices=ECMP_MODES,
          default="resilient"),
    Field("link_down_detect_us", "number", "time for a switch to remove an ECMP member whose "
          "own link went down (hardware: micro- to milliseconds)", unit="us", minimum=0,
          maximum=MAX_US, default=DEFAULT_LINK_DOWN_DETECT_US),
    Field("routing_convergence_us", "number", "time for a failure a switch cannot see, a "
          "drain, or a member coming back (a BGP session must come up and advertise) to "
          "reach it through routing (BGP: hundreds of ms to seconds); at least "
          "link_down_detect_us", unit="us", minimum=0, maximum=MAX_US,
          default=DEFAULT_ROUTING_CONVERGENCE_US),
)
_F = field_map(FIELDS)


def routing(table: Any) -> RoutingConfig:
    """The ``[routing]`` table (absent: the defaults)."""
    table = check_table(table, "routing")
    check_keys(table, _F, "routing")
    values = {key: field.read(table, "routing") for key, field in _F.items()}
    if values["routing_convergence_us"] < values["link_down_detect_us"]:
        raise LabError(f"{values['routing_convergence_us']:g} us is below link_down_detect_us "
                       f"({values['link_down_detect_us']:g} us): a withdrawal through routing "
                       "cannot beat the switch's own link detection",
                       "routing.routing_convergence_us")
    return RoutingConfig(**values)
