"""Minimal pcap / pcapng writer and reader for MRC packets (no scapy on the write path: it is
hot), and the capture options of a run (:class:`CaptureOptions`).

A run's capture (``--pcap``) is pcapng (:class:`PcapngWriter`): one interface per point of
capture, named after the fabric port the datagram crossed (``p3.t0.0->h0.p3``), so every
record says where it was taken; the section header says which policy chose the points. By
default each datagram is recorded **once**, as it is delivered to its host (after every
switch rewrote it: carrier shifted, hop limit counted down, CE or trim); ``sent`` records it
once as it leaves its host, ``every_hop`` at every link. A snap length keeps headers only
(256 bytes by default: every MRC header and then some), and ``every``/``kinds`` sample and
filter, so a millisecond lab need not write half a gigabyte.

Files are classic pcap with nanosecond timestamps (magic ``0xA1B23C4D``), because simulated
time is in picoseconds and microseconds would merge back-to-back 100 Gb/s packets (a 4 KB
packet lasts 0.33 us). The default link type is ``LINKTYPE_RAW`` (101): each record is the
IPv6 packet itself, which tshark/Wireshark dissect directly as IPv6 -> IPv6 -> UDP 4791 ->
InfiniBand BTH; no fake MAC addresses to invent. ``ethernet=True`` writes ``LINKTYPE_ETHERNET``
with a synthetic header instead, for tools that only take Ethernet captures.

Timestamps are truncated to whole nanoseconds. A trimmed packet is recorded as what was on the
wire (the cut bytes), so its captured and original lengths are equal.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final, Self

from mrc.packet import TRIM_DSCP, Packet
from mrc.units import PS_PER_S
from mrc.wire import (
    OFF_BTH,
    OP_ACKNOWLEDGE,
    OP_MRC_PROBE,
    OP_MRC_PROBE_REPLY,
    OP_RDMA_WRITE_ONLY,
    OP_RDMA_WRITE_ONLY_IMM,
    DecodeError,
    decode,
    encode,
)

LINKTYPE_ETHERNET: Final = 1
LINKTYPE_RAW: Final = 101
LINKTYPE_IPV6: Final = 229
MAGIC_NS: Final = 0xA1B23C4D
MAGIC_US: Final = 0xA1B2C3D4
SNAPLEN: Final = 65535
_MAX_RECORD: Final = 1 << 18  # readers refuse absurd record lengths instead of allocating

_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
#: Synthetic Ethernet header: locally administered MACs, EtherType IPv6.
_ETHER_HDR: Final = bytes.fromhex("020000000002" "020000000001" "86dd")

Record = tuple[int, bytes]


class _CaptureFile:
    """The file a capture writer appends to: a path it opens and closes, or a binary file
    object it only flushes (the caller owns it). Shared by the pcap and pcapng writers."""

    def __init__(self, target: str | os.PathLike[str] | BinaryIO) -> None:
        if isinstance(target, (str, os.PathLike)):
            self._file: BinaryIO = open(target, "wb")  # closed in close()
            self._owned = True
        else:
            self._file = target
            self._owned = False

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if self._owned:
            self._file.close()
        else:
            self._file.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class PcapWriter(_CaptureFile):
    """Append (time_ps, packet) records to a pcap file; use as a context manager.

    ``target`` is a path or a binary file object (left open if passed in open)."""

    def __init__(self, target: str | os.PathLike[str] | BinaryIO, *,
                 ethernet: bool = False, snaplen: int = SNAPLEN) -> None:
        super().__init__(target)
        self._ether = _ETHER_HDR if ethernet else b""
        self._snaplen = snaplen
        self.count = 0
        linktype = LINKTYPE_ETHERNET if ethernet else LINKTYPE_RAW
        self._file.write(_GLOBAL.pack(MAGIC_NS, 2, 4, 0, 0, snaplen, linktype))

    def write(self, time_ps: int, packet: bytes | bytearray | memoryview | Packet) -> None:
        """One record; a ``Packet`` is encoded with ``mrc.wire.encode`` first."""
        data = encode(packet) if isinstance(packet, Packet) else bytes(packet)
        if self._ether:
            data = self._ether + data
        ns = time_ps // 1000
        orig = len(data)
        if orig > self._snaplen:
            data = data[:self._snaplen]
        self._file.write(_RECORD.pack(ns // 1_000_000_000, ns % 1_000_000_000, len(data), orig))
        self._file.write(data)
        self.count += 1

    def write_all(self, records: Iterable[tuple[int, bytes | Packet]]) -> int:
        for time_ps, packet in records:
            self.write(time_ps, packet)
        return self.count


def write_pcap(path: str | os.PathLike[str], records: Iterable[tuple[int, bytes | Packet]], *,
               ethernet: bool = False) -> int:
    """Write a whole capture; returns the number of records."""
    with PcapWriter(path, ethernet=ethernet) as writer:
        return writer.write_all(records)


def read_pcap(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Yield (time_ps, IPv6 packet bytes). Malformed files raise ``mrc.wire.DecodeError``.

    Reads pcapng (as :class:`PcapngWriter` writes it) and pcaps in either byte order, micro- or nanosecond resolution, raw-IP/IPv6 or Ethernet
    (the Ethernet header is stripped), so captures from other tools can be fed in too."""
    with open(path, "rb") as f:
        head = f.read(_GLOBAL.size)
        if len(head) >= 4 and struct.unpack_from("<I", head)[0] == _SHB:
            for time_ps, data, _ in read_pcapng(path):
                yield time_ps, data
            return
        if len(head) < _GLOBAL.size:
            raise DecodeError(f"{path}: too short for a pcap header")
        magic_le = struct.unpack_from("<I", head)[0]
        if magic_le in (MAGIC_NS, MAGIC_US):
            order = "<"
        elif struct.unpack_from(">I", head)[0] in (MAGIC_NS, MAGIC_US):
            order = ">"
        else:
            raise DecodeError(f"{path}: not a pcap file (magic {magic_le:#010x})")
        magic, major, _minor, _zone, _sig, _snap, linktype = struct.unpack(
            order + "IHHiIII", head)
        if major != 2:
            raise DecodeError(f"{path}: pcap version {major} unsupported")
        linktype &= 0xFFFF  # upper bits may carry FCS information
        if linktype not in (LINKTYPE_RAW, LINKTYPE_IPV6, LINKTYPE_ETHERNET):
            raise DecodeError(f"{path}: link type {linktype} is not raw IP or Ethernet")
        scale = 1000 if magic == MAGIC_NS else 1_000_000  # picoseconds per sub-second unit
        record = struct.Struct(order + "IIII")
        while True:
            rh = f.read(record.size)
            if not rh:
                return
            if len(rh) < record.size:
                raise DecodeError(f"{path}: truncated record header")
            sec, frac, incl, _orig = record.unpack(rh)
            if incl > _MAX_RECORD or frac >= PS_PER_S // scale:
                raise DecodeError(f"{path}: corrupt record header")
            data = f.read(incl)
            if len(data) < incl:
                raise DecodeError(f"{path}: truncated record")
            if linktype == LINKTYPE_ETHERNET:
                if len(data) < 14 or data[12:14] != b"\x86\xdd":
                    raise DecodeError(f"{path}: Ethernet record is not IPv6")
                data = data[14:]
            yield sec * PS_PER_S + frac * scale, data


def read_packets(path: str | os.PathLike[str]) -> Iterator[tuple[int, Packet]]:
    """Yield (time_ps, decoded Packet); any malformed record raises ``DecodeError``."""
    for time_ps, data in read_pcap(path):
        yield time_ps, decode(data)


# ====================================================================== pcapng
#: pcapng block types and the options used.
_SHB, _IDB, _EPB = 0x0A0D0D0A, 0x00000001, 0x00000006
_BYTE_ORDER = 0x1A2B3C4D
_OPT_COMMENT, _OPT_IF_NAME, _OPT_IF_TSRESOL = 1, 2, 9
#: The default snap length of a run's capture: every MRC header (a DATA packet's are 144
#: bytes, an ACK 136) and a little payload.
DEFAULT_SNAPLEN: Final = 256
#: The points of capture a run can use (see the module docstring).
CAPTURE_POINTS: Final = ("delivered", "sent", "every_hop")
#: The kinds ``--pcap-kinds`` can select.
CAPTURE_KINDS: Final = ("data", "ack", "nack", "probe", "probe_reply", "trimmed")


def _option(code: int, value: bytes) -> bytes:
    pad = (-len(value)) % 4
    return struct.pack("<HH", code, len(value)) + value + bytes(pad)


def _block(kind: int, body: bytes) -> bytes:
    length = 12 + len(body)
    return struct.pack("<II", kind, length) + body + struct.pack("<I", length)


class PcapngWriter(_CaptureFile):
    """Append (time_ps, packet bytes, interface name) records to a pcapng file: one
    interface description per name, created when the name is first used, with nanosecond
    timestamps. ``comment`` goes into the section header (what the capture is)."""

    def __init__(self, target: str | os.PathLike[str] | BinaryIO, *,
                 snaplen: int = SNAPLEN, comment: str = "") -> None:
        if snaplen <= 0:
            raise ValueError(f"snap length must be positive, got {snaplen}")
        super().__init__(target)
        self.snaplen = snaplen
        self.count = 0
        self.bytes_written = 0
        self._ifaces: dict[str, int] = {}
        opts = (_option(_OPT_COMMENT, comment.encode()) if comment else b"") + _option(0, b"")
        self._put(_block(_SHB, struct.pack("<IHHq", _BYTE_ORDER, 1, 0, -1) + opts))

    def _put(self, data: bytes) -> None:
        self._file.write(data)
        self.bytes_written += len(data)

    def interface(self, name: str) -> int:
        """The interface id of ``name`` (its description is written on first use)."""
        found = self._ifaces.get(name)
        if found is None:
            found = self._ifaces[name] = len(self._ifaces)
            opts = (_option(_OPT_IF_NAME, name.encode()) + _option(_OPT_IF_TSRESOL, b"\x09")
                    + _option(0, b""))
            self._put(_block(_IDB, struct.pack("<HHI", LINKTYPE_RAW, 0, self.snaplen) + opts))
        return found

    def write(self, time_ps: int, data: bytes | bytearray | memoryview | Packet,
              interface: str = "capture") -> None:
        raw = encode(data) if isinstance(data, Packet) else bytes(data)
        iface = self.interface(interface)
        ns = time_ps // 1000
        orig = len(raw)
        cut = raw[:self.snaplen]
        pad = (-len(cut)) % 4
        self._put(_block(_EPB, struct.pack("<IIIII", iface, ns >> 32, ns & 0xFFFFFFFF,
                                           len(cut), orig) + cut + bytes(pad)))
        self.count += 1


def read_pcapng(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes, str]]:
    """Yield (time_ps, captured bytes, interface name) of a pcapng file (little-endian
    sections, raw-IP interfaces, as :class:`PcapngWriter` writes them)."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    names: list[str] = []
    resol: list[int] = []
    while pos < len(data):
        if len(data) - pos < 12:
            raise DecodeError(f"{path}: truncated pcapng block")
        kind, length = struct.unpack_from("<II", data, pos)
        if length < 12 or length % 4 or pos + length > len(data):
            raise DecodeError(f"{path}: corrupt pcapng block length {length}")
        body = data[pos + 8:pos + length - 4]
        if kind == _SHB:
            if struct.unpack_from("<I", body)[0] != _BYTE_ORDER:
                raise DecodeError(f"{path}: only little-endian pcapng is read")
            names, resol = [], []
        elif kind == _IDB:
            link = struct.unpack_from("<H", body)[0]
            if link != LINKTYPE_RAW:
                raise DecodeError(f"{path}: interface link type {link} is not raw IP")
            name, tsresol = f"if{len(names)}", 6
            opos = 8
            while opos + 4 <= len(body):
                code, olen = struct.unpack_from("<HH", body, opos)
                value = body[opos + 4:opos + 4 + olen]
                if code == 0:
                    break
                if code == _OPT_IF_NAME:
                    name = value.decode(errors="replace")
                elif code == _OPT_IF_TSRESOL and value:
                    tsresol = value[0]
                opos += 4 + olen + (-olen) % 4
            names.append(name)
            resol.append(tsresol)
        elif kind == _EPB:
            iface, hi, lo, incl, _orig = struct.unpack_from("<IIIII", body)
            if iface >= len(names) or incl > len(body) - 20 or resol[iface] & 0x80:
                raise DecodeError(f"{path}: corrupt packet block")
            units = (hi << 32) | lo
            time_ps = units * PS_PER_S // 10 ** resol[iface]
            yield time_ps, bytes(body[20:20 + incl]), names[iface]
        pos += length


def datagram_kind(data: bytes | bytearray | memoryview) -> str:
    """The ``CAPTURE_KINDS`` word of an encoded datagram (a trimmed one is ``trimmed``)."""
    if len(data) > 1 and ((data[0] & 0x0F) << 2 | data[1] >> 6) == TRIM_DSCP:
        return "trimmed"
    if len(data) <= OFF_BTH:
        return "data"
    op = data[OFF_BTH]
    if op in (OP_RDMA_WRITE_ONLY, OP_RDMA_WRITE_ONLY_IMM):
        return "data"
    if op == OP_ACKNOWLEDGE:
        syndrome = data[OFF_BTH + 12] if len(data) > OFF_BTH + 12 else 0
        return "ack" if syndrome >> 5 == 0 else "nack"
    if op == OP_MRC_PROBE:
        return "probe"
    if op == OP_MRC_PROBE_REPLY:
        return "probe_reply"
    return "data"


@dataclass(frozen=True)
class CaptureOptions:
    """What a run captures (``--pcap`` and its options): ``path``; ``point`` (one of
    ``CAPTURE_POINTS``); ``snaplen`` bytes kept of each datagram; one datagram in ``every``
    of those that pass ``kinds`` (None: every kind)."""

    path: str
    point: str = "delivered"
    snaplen: int = DEFAULT_SNAPLEN
    every: int = 1
    kinds: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.point not in CAPTURE_POINTS:
            raise ValueError(f"capture point {self.point!r}; known: {', '.join(CAPTURE_POINTS)}")
        if self.snaplen < 1 or self.every < 1:
            raise ValueError("snap length and sampling must be >= 1")
        if self.kinds is not None and not self.kinds <= set(CAPTURE_KINDS):
            bad = sorted(self.kinds - set(CAPTURE_KINDS))
            raise ValueError(f"unknown kinds {bad}; known: {', '.join(CAPTURE_KINDS)}")

    def comment(self) -> str:
        where = {"delivered": "each datagram once, as delivered to its host's NIC port",
                 "sent": "each datagram once, as it left its host's NIC port",
                 "every_hop": "every datagram at every link it crossed"}[self.point]
        kinds = "all kinds" if self.kinds is None else ", ".join(sorted(self.kinds))
        return (f"mrc-lab capture: {where}; interface = the fabric port; snap length "
                f"{self.snaplen} B; 1 in {self.every} of {kinds}")


class Capture:
    """A run's capture: decides per datagram (kind filter, 1-in-N sampling) and writes the
    kept ones, each under the name of the port where it was taken."""

    def __init__(self, options: CaptureOptions, path: str | os.PathLike[str] | None = None
                 ) -> None:
        self.options = options
        self.writer = PcapngWriter(options.path if path is None else path,
                                   snaplen=options.snaplen, comment=options.comment())
        self._kinds = options.kinds
        self._every = options.every
        self.seen = 0

    def wants(self, kind: str) -> bool:
        """Whether the next datagram, of ``kind``, is to be written (call once per datagram:
        it counts for the sampling)."""
        if self._kinds is not None and kind not in self._kinds:
            return False
        self.seen += 1
        return self._every == 1 or (self.seen - 1) % self._every == 0

    def offer(self, time_ps: int, port: str, data: bytes | bytearray) -> None:
        """One datagram crossed ``port``: write it if the filter and sampling keep it."""
        if self.wants(datagram_kind(data)):
            self.writer.write(time_ps, data, port)

    @property
    def count(self) -> int:
        return self.writer.count

    def close(self) -> None:
        self.writer.close()


def capture_for(capture: CaptureOptions | None, name: str, several: bool
                ) -> CaptureOptions | None:
    """One transport's capture: ``FILE.<transport>.pcapng`` when several transports run."""
    if capture is None or not several:
        return capture
    path = Path(capture.path)
    return dataclasses.replace(
        capture, path=str(path.with_name(f"{path.stem}.{name}{path.suffix or '.pcapng'}")))
