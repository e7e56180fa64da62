"""Minimal pcap writer and reader for MRC packets (no scapy on the write path: it is hot).

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

import os
import struct
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import BinaryIO, Final

from mrc.packet import Packet
from mrc.units import PS_PER_S
from mrc.wire import DecodeError, decode, encode

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


class PcapWriter:
    """Append (time_ps, packet) records to a pcap file; use as a context manager.

    ``target`` is a path or a binary file object (left open if passed in open)."""

    def __init__(self, target: str | os.PathLike[str] | BinaryIO, *,
                 ethernet: bool = False, snaplen: int = SNAPLEN) -> None:
        if isinstance(target, (str, os.PathLike)):
            self._file: BinaryIO = open(target, "wb")  # closed in close()
            self._owned = True
        else:
            self._file = target
            self._owned = False
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

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if self._owned:
            self._file.close()
        else:
            self._file.flush()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def write_pcap(path: str | os.PathLike[str], records: Iterable[tuple[int, bytes | Packet]], *,
               ethernet: bool = False) -> int:
    """Write a whole capture; returns the number of records."""
    with PcapWriter(path, ethernet=ethernet) as writer:
        return writer.write_all(records)


def read_pcap(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Yield (time_ps, IPv6 packet bytes). Malformed files raise ``mrc.wire.DecodeError``.

    Reads pcaps in either byte order, micro- or nanosecond resolution, raw-IP/IPv6 or Ethernet
    (the Ethernet header is stripped), so captures from other tools can be fed in too."""
    with open(path, "rb") as f:
        head = f.read(_GLOBAL.size)
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
