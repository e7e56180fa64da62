"""``[transport.NAME.env]``: the NCCL plugin's environment, pasted verbatim from a real job.

An engineer who runs MRC sets the NCCL MRC plugin's variables (``microsoft/mrc-nccl-plugin``,
``MRC_ENV_VARIABLES.md`` and ``src/net_mrc_plugin.c``) and NCCL's IB ones; the plugin's test
scripts add NCCL's general ones. This table knows every one of them, once:

* a variable the model implements sets a transport key (``NCCL_MRC_TIMEOUT`` ->
  ``timeout``), with the plugin's range checked;
* a variable that does not apply to this transport (``NCCL_IB_TIMEOUT`` on an MRC QP: the
  MRC API ignores IBV_QP_TIMEOUT) or that the model has no counterpart for
  (``NCCL_IB_GID_INDEX``) is accepted and reported as ignored, with why;
* anything else, or a value that does not parse, is refused: one line, exit 2.

Values may be TOML integers or the strings a shell would pass (``"20"``). A variable and
the transport key it sets may not both be given. :func:`markdown_table` renders the table
for the docs (docs/nccl-env.md is generated from it and a test keeps them equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.checks import suggest


@dataclass(frozen=True)
class EnvVar:
    """One variable: its plugin default and range, and what it does in each transport
    (``mrc``/``rc``: the key it sets, or None when it does not apply there)."""

    name: str
    default: str
    range: tuple[int, int] | None  # inclusive; None: a string (any value accepted)
    meaning: str
    mrc: str | None = None
    rc: str | None = None
    why_ignored: str = ""  # said when a transport ignores it

    def parse(self, value: Any, key: str) -> Any:
        if self.range is None:
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise LabError(f"expected a string, got {value!r}", key)
            return str(value)
        if isinstance(value, bool):
            raise LabError(f"expected an integer, got {value!r}", key)
        if isinstance(value, str):
            try:
                value = int(value.strip(), 0)
            except ValueError:
                raise LabError(f"expected an integer, got {value!r}", key) from None
        if not isinstance(value, int):
            raise LabError(f"expected an integer, got {value!r}", key)
        lo, hi = self.range
        if not lo <= value <= hi:
            raise LabError(f"{value} outside the plugin's range {lo}..{hi}", key)
        return value


_UNMODELLED = "no counterpart in the model"
_HOST = "host and NCCL setup, not the network"
BIG = 2**32 - 1

#: Every variable, in the order of docs/nccl-env.md.
VARIABLES: tuple[EnvVar, ...] = (
    EnvVar("NCCL_MRC_TIMEOUT", "20", (0, 24), "MRC local ACK timeout, 1.024 us x 2^value",
           mrc="timeout", why_ignored="an MRC variable: RC QPs take NCCL_IB_TIMEOUT"),
    EnvVar("NCCL_MRC_RETRY_CNT_LINEAR", "7", (0, 7), "linear (fixed-interval) retry limit",
           mrc="retry_linear_cnt", why_ignored="an MRC variable"),
    EnvVar("NCCL_MRC_RETRY_CNT_EXP", "25", (0, 25),
           "exponential-backoff retry limit; 25 = retry forever",
           mrc="retry_exp_cnt", why_ignored="an MRC variable"),
    EnvVar("NCCL_MRC_QP_HINT_ENABLE", "1", (0, 1),
           "attach QP hints (which carry the CC rate hints) to MRC QPs",
           mrc="cc.rate_hints_enabled", why_ignored="an MRC variable"),
    EnvVar("NCCL_MRC_CC_INIT_RATE", "0", (0, BIG),
           "initial CC rate hint (0: none); read as Mb/s, the unit is not published",
           mrc="cc.init_rate_mbps", why_ignored="an MRC variable"),
    EnvVar("NCCL_MRC_CC_MIN_RATE", "0", (0, BIG),
           "minimum CC rate hint (0: none); the plugin divides it by the QPs per "
           "connection", mrc="cc.min_rate_mbps", why_ignored="an MRC variable"),
    EnvVar("NCCL_MRC_CC_MAX_RATE", "0", (0, BIG), "maximum CC rate hint (0: none)",
           mrc="cc.max_rate_mbps", why_ignored="an MRC variable"),
    EnvVar("NCCL_MRC_NUM_PLANES", "-", (1, 256),
           "planes of the MRC NIC (named in public write-ups; not in the stored plugin)",
           mrc="@planes", why_ignored="an MRC variable"),
    EnvVar("NCCL_IB_QPS_PER_CONNECTION", "1", (1, 128),
           "QPs per connection (per NIC port for RC); the plugin's tests use 2",
           mrc="qps_per_connection", rc="qps_per_plane"),
    EnvVar("NCCL_IB_SPLIT_DATA_ON_QPS", "0", (0, 1),
           "1: split every message over the connection's QPs; 0: one QP per message, in turn",
           mrc="split_data_on_qps", rc="split_data_on_qps"),
    EnvVar("NCCL_IB_TIMEOUT", "20", (0, 31), "RC local ACK timeout, 4.096 us x 2^value",
           rc="timeout_exp",
           why_ignored="mrc.h: IBV_QP_TIMEOUT is not supported on MRC QPs (NCCL_MRC_TIMEOUT)"),
    EnvVar("NCCL_IB_RETRY_CNT", "7", (0, 7), "RC retry count", rc="retry_cnt",
           why_ignored="mrc.h: IBV_QP_RETRY_CNT is not supported on MRC QPs"),
    EnvVar("NCCL_IB_TC", "-1", (-1, 255), "traffic class of data QPs",
           why_ignored="one data traffic class in the model (DSCP 26); the tests set 4"),
    EnvVar("NCCL_IB_FIFO_TC", "0", (-1, 255), "traffic class of the FIFO (control) QP",
           why_ignored="NCCL's FIFO QP is not modelled"),
    EnvVar("NCCL_IB_SL", "-1", (-1, 15), "InfiniBand service level", why_ignored="IB only"),
    EnvVar("NCCL_IB_GID_INDEX", "-1", (-1, 255), "RoCE GID index", why_ignored=_UNMODELLED),
    EnvVar("NCCL_IB_ROUTABLE_FLID_GID_INDEX", "1", (-1, 255), "GID index for routable FLIDs",
           why_ignored="IB only"),
    EnvVar("NCCL_IB_ROCE_VERSION_NUM", "2", (1, 2), "RoCE version",
           why_ignored="always RoCE v2 (UDP 4791)"),
    EnvVar("NCCL_IB_IS_GLOBAL", "0", (0, 1), "use a GRH", why_ignored="IB only"),
    EnvVar("NCCL_IB_USE_INLINE", "0", (0, 1), "inline small sends", why_ignored=_UNMODELLED),
    EnvVar("NCCL_IB_RETURN_ASYNC_EVENTS", "1", (0, 1), "abort on async IB events",
           why_ignored="every QP error aborts the job in the model"),
    EnvVar("NCCL_IBEXT_DISABLE", "0", (0, 1), "disable the plugin", why_ignored=_HOST),
    EnvVar("NCCL_IB_DISABLE", "0", (0, 1), "disable the IB transport", why_ignored=_HOST),
    EnvVar("NCCL_IB_MERGE_VFS", "1", (0, 1), "merge virtual functions", why_ignored=_HOST),
    EnvVar("NCCL_IB_MERGE_NICS", "1", (0, 1), "merge NIC ports into one device",
           why_ignored="a host's NIC ports are its planes in the model"),
    EnvVar("NCCL_IB_WARN_RAIL_LOCAL", "0", (0, 1), "warn on rail-local setups",
           why_ignored=_HOST),
    EnvVar("NCCL_IB_PCI_RELAXED_ORDERING", "2", (0, 2), "PCI relaxed ordering of MRs",
           why_ignored="no PCIe in the model"),
    EnvVar("NCCL_IB_ECE_ENABLE", "1", (0, 1), "enhanced connection establishment",
           why_ignored=_UNMODELLED),
    EnvVar("NCCL_IB_HCA", "-", None, "which HCAs/ports to use", why_ignored=_HOST),
    EnvVar("NCCL_GDR_FLUSH_DISABLE", "0", (0, 1), "skip the GPU Direct flush",
           why_ignored="no GPUs in the model"),
    EnvVar("NCCL_NET_PLUGIN", "-", None, "network plugin library", why_ignored=_HOST),
    EnvVar("NCCL_TUNER_PLUGIN", "-", None, "tuner plugin library", why_ignored=_HOST),
    EnvVar("NCCL_SOCKET_IFNAME", "-", None, "bootstrap interface", why_ignored=_HOST),
    EnvVar("NCCL_DEBUG", "-", None, "log level", why_ignored=_HOST),
    EnvVar("NCCL_DEBUG_SUBSYS", "-", None, "log subsystems", why_ignored=_HOST),
    EnvVar("NCCL_SHM_DISABLE", "0", (0, 1), "disable shared memory", why_ignored=_HOST),
    EnvVar("NCCL_P2P_DISABLE", "0", (0, 1), "disable GPU peer-to-peer", why_ignored=_HOST),
    EnvVar("NCCL_MNNVL_ENABLE", "-", (0, 2), "multi-node NVLink", why_ignored=_HOST),
    EnvVar("NCCL_NVLS_ENABLE", "-", (0, 2), "NVLink SHARP", why_ignored=_HOST),
    EnvVar("NCCL_GDRCOPY_ENABLE", "0", (0, 1), "GDRCopy", why_ignored=_HOST),
    EnvVar("NCCL_GDRCOPY_SYNC_ENABLE", "1", (0, 1), "GDRCopy for sync", why_ignored=_HOST),
    EnvVar("NCCL_TESTS_SPLIT_MASK", "-", (0, BIG), "nccl-tests communicator split",
           why_ignored=_HOST),
    EnvVar("NV_MRC_POST_SEND_PREFER_BF", "-", (0, 1), "vendor: post sends by BlueFlame",
           why_ignored="vendor doorbell detail, not the network"),
)
BY_NAME = {v.name: v for v in VARIABLES}


@dataclass(frozen=True)
class EnvResult:
    """What an env table does to one transport: the keys it sets (lab units, dotted for
    nested tables) and the variables it ignores, with why."""

    keys: dict[str, Any]
    ignored: tuple[tuple[str, str], ...]


def translate(env: Mapping[str, Any], kind: str, prefix: str, planes: int) -> EnvResult:
    """The keys an ``env`` table sets on a transport of ``kind`` (see the module
    docstring); raises LabError on an unknown or malformed variable."""
    keys: dict[str, Any] = {}
    ignored: list[tuple[str, str]] = []
    for name, raw in env.items():
        key = f"{prefix}.{name}"
        var = BY_NAME.get(name)
        if var is None:
            raise LabError(f"unknown variable{suggest(name, BY_NAME)}; the table takes the "
                           "NCCL plugin's variables (docs/nccl-env.md)", key)
        value = var.parse(raw, key)
        target = var.mrc if kind == "mrc" else var.rc
        if target is None:
            ignored.append((name, var.why_ignored or "does not apply"))
            continue
        if target == "@planes":
            if value != planes:
                raise LabError(f"{value} planes contradicts the fabric's {planes}", key)
            continue
        if name == "NCCL_IB_SPLIT_DATA_ON_QPS":
            value = bool(value)
        keys[target] = value
    if kind == "mrc":
        _rate_hints(keys, ignored)
    return EnvResult(keys, tuple(ignored))


def _rate_hints(keys: dict[str, Any], ignored: list[tuple[str, str]]) -> None:
    """The plugin puts the CC rate hints in the QP hint: without hints (or at 0) they do
    nothing; the minimum is divided by the QPs per connection, as the plugin does."""
    enabled = keys.pop("cc.rate_hints_enabled", 1)
    qps = int(keys.get("qps_per_connection", 1))
    for name, target in (("NCCL_MRC_CC_INIT_RATE", "cc.init_rate_mbps"),
                         ("NCCL_MRC_CC_MIN_RATE", "cc.min_rate_mbps"),
                         ("NCCL_MRC_CC_MAX_RATE", "cc.max_rate_mbps")):
        if target not in keys:
            continue
        value = keys.pop(target)
        if not enabled:
            ignored.append((name, "NCCL_MRC_QP_HINT_ENABLE=0: no QP hint carries it"))
        elif value:
            keys[target] = value // qps if target == "cc.min_rate_mbps" else value


def markdown_table() -> str:
    """docs/nccl-env.md's table: every variable, its plugin default and range, and what the
    model does with it under each transport."""
    lines = ["| variable | plugin default | range | meaning | MRC | RC |",
             "|---|---|---|---|---|---|"]
    for v in VARIABLES:
        rng = "string" if v.range is None else f"{v.range[0]}..{v.range[1]}"

        def cell(target: str | None, v: EnvVar = v) -> str:
            if target is None:
                return f"ignored: {v.why_ignored or 'does not apply'}"
            if target == "@planes":
                return "checked: must equal the fabric's planes"
            return f"`{target}`"
        lines.append(f"| `{v.name}` | {v.default} | {rng} | {v.meaning} | {cell(v.mrc)} "
                     f"| {cell(v.rc)} |")
    return "\n".join(lines)
