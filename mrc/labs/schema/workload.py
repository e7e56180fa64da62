"""``[workload]``: the traffic, one table whose ``kind`` says which keys it takes.

Kinds: ``write_bw`` (perftest), ``sendrecv``/``all_reduce``/``all_to_all`` (nccl-tests
style collectives), ``permutation``, and ``connection_matrix`` (htsim's format, from a file
or inline). Hosts are written as indices (``3``) or names (``"h3"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.checks import (
    check_host,
    check_hosts,
    check_int,
    check_keys,
    check_list,
    check_table,
)
from mrc.labs.schema.connection_matrix import parse_connection_matrix
from mrc.labs.schema.fields import Derived, Field, field_map
from mrc.labs.schema.lab import (
    Collective,
    ConnectionMatrix,
    Permutation,
    RunSpec,
    Workload,
    WriteBw,
)
from topology.spec import FabricSpec

MAX_MESSAGE_BYTES = 1 << 40  # 1 TiB: beyond anything a packet-level run can carry
#: Iterations are recorded one by one; a million per size is beyond any packet-level run.
MAX_ITERS = 1_000_000
_IN_RUN = "before run.duration_us"
WORKLOAD_KINDS = ("write_bw", "sendrecv", "all_reduce", "all_to_all", "permutation",
                  "connection_matrix")
COLLECTIVE_KINDS = ("sendrecv", "all_reduce", "all_to_all")

KIND = Field("kind", "string", "the traffic pattern", choices=WORKLOAD_KINDS)
START = Field("start_us", "number", "when the traffic starts", unit="us", minimum=0,
              default=0.0, limit=_IN_RUN)
HOSTS = Field("hosts", "array", "the hosts taking part (at least 2, each once)",
              default=Derived("every host of the fabric"))

#: kind -> its table (``kind`` first; the keys in the order they are checked).
FIELDS: dict[str, tuple[Field, ...]] = {
    "write_bw": (
        KIND,
        Field("pairs", "array", "[src, dst] host pairs, one connection each way",
              default=Derived("host 0 and the first host under another T0")),
        Field("bidirectional", "boolean", "also write from dst to src", default=True),
        Field("message_bytes", "integer", "size of every WRITE", unit="bytes", gt=0,
              maximum=MAX_MESSAGE_BYTES, default=1 << 20),
        Field("tx_depth", "integer", "WRITEs in flight per direction", minimum=1,
              maximum=4096, default=4),
        START,
    ),
    "sendrecv": (
        KIND,
        HOSTS,
        Field("sizes_bytes", "array", "message sizes, each run for every iteration",
              unit="bytes", default=Derived("[1048576], or the min/max/step series")),
        Field("min_bytes", "integer", "first size of a doubling (step_factor) series; "
              "required with max_bytes or step_factor", unit="bytes", gt=0,
              maximum=MAX_MESSAGE_BYTES, missing=" (with max_bytes)"),
        Field("max_bytes", "integer", "last size of the series at most", unit="bytes", gt=0,
              maximum=MAX_MESSAGE_BYTES, default=Derived("min_bytes")),
        Field("step_factor", "integer", "ratio between successive sizes", minimum=2,
              maximum=MAX_MESSAGE_BYTES, default=2),
        Field("iters", "integer", "timed iterations per size", minimum=1, maximum=MAX_ITERS,
              default=5),
        Field("warmup_iters", "integer", "untimed iterations per size, first", minimum=0,
              maximum=MAX_ITERS, default=1),
        START,
    ),
    "permutation": (
        KIND,
        HOSTS,
        Field("size_bytes", "integer", "bytes every host sends to its peer", unit="bytes",
              gt=0, maximum=MAX_MESSAGE_BYTES, default=2 << 20),
        START,
    ),
    "connection_matrix": (
        KIND,
        Field("file", "string", "an htsim connection-matrix file (relative to the lab file); "
              "give file or text", default=None),
        Field("text", "string", "the connection matrix inline", default=None),
    ),
}
FIELDS["all_reduce"] = FIELDS["sendrecv"]
FIELDS["all_to_all"] = FIELDS["sendrecv"]
_BY_KIND = {kind: field_map(table) for kind, table in FIELDS.items()}


def workload(table: Any, spec: FabricSpec, base_dir: Path | None) -> Workload:
    """The ``[workload]`` table, checked against the fabric, with its defaults."""
    table = check_table(table, "workload")
    kind = KIND.read(table, "workload")
    fields = _BY_KIND[kind]
    check_keys(table, fields, "workload")
    start = START.read(table, "workload")
    if kind == "write_bw":
        return _write_bw(table, fields, spec, start)
    if kind in COLLECTIVE_KINDS:
        hosts = _hosts_or_all(table, spec)
        return Collective(kind=kind, hosts=hosts, sizes_bytes=_sizes(table, fields),
                          iters=fields["iters"].read(table, "workload"),
                          warmup_iters=fields["warmup_iters"].read(table, "workload"),
                          start_us=start)
    if kind == "permutation":
        hosts = _hosts_or_all(table, spec)
        size = fields["size_bytes"].read(table, "workload")
        return Permutation(hosts=hosts, size_bytes=size, start_us=start)
    return _connection_matrix(table, fields, spec, base_dir)


def _hosts_or_all(table: Mapping[str, Any], spec: FabricSpec) -> tuple[int, ...]:
    if "hosts" in table:
        return check_hosts(table["hosts"], "workload.hosts", spec)
    if spec.hosts < 2:
        raise LabError("needs at least 2 hosts", "workload")
    return tuple(range(spec.hosts))


def check_workload_in_run(workload: Workload, run: RunSpec) -> None:
    """Traffic that would start after the run ends is a mistake, not an empty result."""
    if isinstance(workload, ConnectionMatrix):
        for flow in workload.flows:
            if flow.start_us is not None and flow.start_us >= run.duration_us:
                where = "workload.file" if workload.file else "workload.text"
                raise LabError(f"line {flow.line}: flow {flow.flow_id} starts at "
                               f"{flow.start_us:g} us, after the run ends "
                               f"(duration_us = {run.duration_us:g})", where)
    elif workload.start_us >= run.duration_us:
        raise LabError(f"{workload.start_us:g} us is not inside the run "
                       f"(duration_us = {run.duration_us:g})", "workload.start_us")


def default_pair(spec: FabricSpec) -> tuple[int, int]:
    """Host 0 and the first host under another T0, so traffic crosses the T1 tier."""
    if spec.hosts < 2:
        raise LabError("write_bw needs at least 2 hosts", "workload")
    return (0, spec.hosts_per_t0 if spec.t0_per_plane > 1 else 1)


def _write_bw(table: Mapping[str, Any], fields: Mapping[str, Field], spec: FabricSpec,
              start: float) -> WriteBw:
    if "pairs" in table:
        pairs = []
        for i, pair in enumerate(check_list(table["pairs"], "workload.pairs", min_len=1)):
            key = f"workload.pairs.{i}"
            items = check_list(pair, key)
            if len(items) != 2:
                raise LabError(f"expected [src, dst], got {len(items)} entries", key)
            src, dst = (check_host(v, f"{key}.{j}", spec) for j, v in enumerate(items))
            if src == dst:
                raise LabError(f"a host cannot write to itself (h{src})", key)
            pairs.append((src, dst))
    else:
        pairs = [default_pair(spec)]
    return WriteBw(
        pairs=tuple(pairs),
        bidirectional=fields["bidirectional"].read(table, "workload"),
        message_bytes=fields["message_bytes"].read(table, "workload"),
        tx_depth=fields["tx_depth"].read(table, "workload"),
        start_us=start)


def size_series(min_bytes: int, max_bytes: int, step_factor: int) -> tuple[int, ...]:
    """nccl-tests' ``-b MIN -e MAX -f FACTOR`` sizes."""
    sizes = [min_bytes]
    while sizes[-1] * step_factor <= max_bytes:
        sizes.append(sizes[-1] * step_factor)
    return tuple(sizes)


def _sizes(table: Mapping[str, Any], fields: Mapping[str, Field]) -> tuple[int, ...]:
    ranged = [k for k in ("min_bytes", "max_bytes", "step_factor") if k in table]
    if "sizes_bytes" in table:
        if ranged:
            raise LabError("give either sizes_bytes or min_bytes/max_bytes/step_factor, not both",
                           f"workload.{ranged[0]}")
        items = check_list(table["sizes_bytes"], "workload.sizes_bytes", min_len=1)
        return tuple(check_int(v, f"workload.sizes_bytes.{i}", gt=0, maximum=MAX_MESSAGE_BYTES)
                     for i, v in enumerate(items))
    if not ranged:
        return (1 << 20,)
    lo = fields["min_bytes"].read(table, "workload")
    hi = fields["max_bytes"].read(table, "workload", default=lo)
    factor = fields["step_factor"].read(table, "workload")
    if hi < lo:
        raise LabError(f"{hi} is below min_bytes ({lo})", "workload.max_bytes")
    return size_series(lo, hi, factor)


def _connection_matrix(table: Mapping[str, Any], fields: Mapping[str, Field],
                       spec: FabricSpec, base_dir: Path | None) -> ConnectionMatrix:
    has_file, has_text = "file" in table, "text" in table
    if has_file == has_text:
        raise LabError("give exactly one of file (an htsim connection-matrix path) or text",
                       "workload")
    if has_text:
        text = fields["text"].read(table, "workload")
        matrix = parse_connection_matrix(text, "workload.text")
        file = None
    else:
        file = fields["file"].read(table, "workload")
        text = _read_matrix_file(file, base_dir)
        matrix = parse_connection_matrix(text, f"workload.file ({Path(file).name})")
    nodes, flows, triggers = matrix
    if nodes > spec.hosts:
        raise LabError(f"the matrix has {nodes} nodes but the fabric only {spec.hosts} hosts",
                       "workload.file" if file else "workload.text")
    return ConnectionMatrix(flows=tuple(flows), nodes=nodes, file=file,
                            text=None if file else text, triggers=tuple(triggers))


def _read_matrix_file(file: str, base_dir: Path | None) -> str:
    path = Path(file)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_file():
        raise LabError(f"no such connection-matrix file: {path}", "workload.file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LabError(f"cannot read {path}: {exc.strerror or exc}", "workload.file") from None
    if b"\x00" in data:
        raise LabError(f"{path.name}: binary data (NUL bytes), not a connection matrix",
                       "workload.file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LabError(f"{path.name}: not UTF-8 text (bad byte at offset {exc.start})",
                       "workload.file") from None
