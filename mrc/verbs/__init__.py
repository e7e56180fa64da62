"""A Python API with libmrc's object model, over the sans-IO MRC QP and the simulator.

The names follow OCP ``mrc.h`` (application: context, CQ, QP with modify/query, WRITE and
WRITE with immediate, receive WRs) and ``mrc_ctl.h`` (controller: EV and CC profiles, EV
state operations and deny masks, the EV event CQ with its mask); see docs/verbs.md for a
script of a QP's whole life, as the C examples have it.

* :mod:`mrc.verbs.fabric`: the driver (a simulated fabric; time moves when asked);
* :mod:`mrc.verbs.objects`: ``Context``, ``CompletionQueue``, ``QueuePair``, work requests
  and completions;
* :mod:`mrc.verbs.control`: ``Controller``, ``EvEventCq``, ``EvEvent``.
"""

from mrc.verbs.control import (
    CC_ALGORITHMS,
    PROFILE_INIT,
    PROFILE_OFFLINE,
    PROFILE_ONLINE,
    Controller,
    EvEvent,
    EvEventCq,
    VerbsError,
)
from mrc.verbs.fabric import Fabric
from mrc.verbs.objects import (
    ERR,
    INIT,
    RST,
    RTR,
    RTS,
    WC_RECV_RDMA_WITH_IMM,
    WC_RETRY_EXC_ERR,
    WC_SUCCESS,
    WC_WR_FLUSH_ERR,
    WR_RDMA_WRITE,
    WR_RDMA_WRITE_WITH_IMM,
    CompletionQueue,
    Context,
    DeviceAttr,
    QueuePair,
    RecvWr,
    SendWr,
    WorkCompletion,
)

__all__ = [
    "CC_ALGORITHMS", "ERR", "INIT", "PROFILE_INIT", "PROFILE_OFFLINE", "PROFILE_ONLINE", "RST",
    "RTR", "RTS", "WC_RECV_RDMA_WITH_IMM", "WC_RETRY_EXC_ERR", "WC_SUCCESS", "WC_WR_FLUSH_ERR",
    "WR_RDMA_WRITE", "WR_RDMA_WRITE_WITH_IMM", "CompletionQueue", "Context", "Controller",
    "DeviceAttr", "EvEvent", "EvEventCq", "Fabric", "QueuePair", "RecvWr", "SendWr",
    "VerbsError", "WorkCompletion",
]
