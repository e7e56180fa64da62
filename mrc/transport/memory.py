"""Verifiable payload: what senders put in packets and how receivers place it exactly once.

In simulation a packet carries no bytes, only a 64-bit ``digest`` of the segment it stands
for (derived from a per-message key and the offset). The receiver folds each *placed* segment
into a checksum together with the offset it placed it at, so a duplicate, a misplacement or a
wrong segment changes the result; the sender computes the checksum the message must have.
With real bytes (live runtime) the same class places them into a buffer and uses SHA-256.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from typing import Any

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

# 64-bit wrapping arithmetic in the compiled build is exactly the masked Python result
# (digests are 64-bit)
_MASK64 = cython.declare(cython.ulonglong, 0xFFFFFFFFFFFFFFFF)


def message_key(src: int, qpn: int, msg_id: int, seed: int = 0) -> int:
    """Stable per-message key (crc32-based: never Python's salted hash)."""
    hi = zlib.crc32(struct.pack("<QQQQ", src, qpn, msg_id, seed))
    lo = zlib.crc32(struct.pack("<QQQQ", seed, msg_id, qpn, src))
    return (hi << 32) | lo


_K1 = cython.declare(cython.ulonglong, 0x9E3779B97F4A7C15)
_K2 = cython.declare(cython.ulonglong, 0xBF58476D1CE4E5B9)
_K3 = cython.declare(cython.ulonglong, 0x94D049BB133111EB)
_K4 = cython.declare(cython.ulonglong, 0xD6E8FEB86659FD93)


@cython.ccall
@cython.annotation_typing(True)
@cython.exceptval(check=False)
def segment_digest(key: cython.ulonglong, offset: cython.ulonglong,
                   length: cython.ulonglong) -> cython.ulonglong:
    """What a segment's bytes 'are' in simulation: 64 bits determined by key, offset and
    length. A splitmix64-style mix (multiply and xor-shift rounds that spread every input
    bit over the result): once per packet sent, so it is 64-bit C arithmetic when
    compiled; here each product is masked to the same low 64 bits."""
    x: cython.ulonglong = (key ^ ((offset + 1) * _K1) ^ (length * _K4)) & _MASK64
    x = ((x ^ (x >> 30)) * _K2) & _MASK64
    x = ((x ^ (x >> 27)) * _K3) & _MASK64
    return x ^ (x >> 31)


@cython.ccall
@cython.annotation_typing(True)
@cython.exceptval(check=False)
def _fold(offset: cython.ulonglong, digest: cython.ulonglong) -> cython.ulonglong:
    # Bind a digest to where it was placed: the same digest placed elsewhere folds differently.
    # (Only the low 64 bits of each product matter: the compiled build multiplies in 64 bits.)
    return ((digest ^ ((offset + 1) * _K1)) * _K2) & _MASK64


def expected_checksum(key: int, length: int, mtu: int) -> int:
    """Checksum a receiver must report for a message of ``length`` bytes segmented at ``mtu``."""
    total = 0
    for offset in range(0, length, mtu):
        seg = min(mtu, length - offset)
        total = (total + _fold(offset, segment_digest(key, offset, seg))) & _MASK64
    return total


def payload_sha256(payload: bytes | bytearray) -> int:
    """Checksum of a real-bytes message, as a 64-bit int (first 8 bytes of SHA-256)."""
    return int.from_bytes(hashlib.sha256(payload).digest()[:8], "big")


@cython.cclass
class ReceiveBuffer:
    """One message being assembled at the receiver.

    Offsets are multiples of the sender's MTU (every packet but the last is full), so a
    bytearray of one flag per segment tracks exactly-once placement in O(1).
    """

    msg_id: cython.longlong  # as Packet has it
    length: cython.longlong
    mtu: cython.longlong
    placed: cython.longlong
    first_ts: cython.longlong
    _seen: bytearray
    _checksum: cython.ulonglong
    _data: Any
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, msg_id: int, length: int, mtu: int, real_bytes: bool = False,
                 first_ts: int = 0) -> None:
        self.msg_id = msg_id
        self.length = length
        self.mtu = mtu
        self.placed = 0
        #: the earliest send time among the packets seen (the receiver's notion of when the
        #: message was posted: only the sender's driver knows the post time)
        self.first_ts = first_ts
        self._seen = bytearray((length + mtu - 1) // mtu or 1)
        self._checksum = 0
        self._data = bytearray(length) if real_bytes else None

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def place(self, offset: Any, length: cython.longlong, digest: cython.ulonglong,
              payload: Any = None) -> cython.longlong:
        """Place one segment; returns the new bytes placed (0 for a duplicate).

        Raises ValueError for a segment that does not fit the message: a transport bug or
        a corrupt packet, never something to paper over.
        """
        # offset: a wire field (u64): Python semantics for any value a packet may carry, until
        # it is known to lie inside the message
        mtu: cython.longlong = self.mtu
        end: cython.longlong = self.length
        off: cython.longlong
        index: cython.longlong
        rem: cython.longlong
        if 0 <= offset < end:  # from here a C integer in the compiled build
            off = offset
            index = off // mtu
            rem = off - index * mtu
        else:  # (negative, or past the end: never a segment of this message)
            off = end
            index = -1
            rem = 1
        if rem or off + length > end or length <= 0 or (
                length != mtu and off + length != end):
            raise ValueError(
                f"segment offset={offset} length={length} does not fit message {self.msg_id} "
                f"of {self.length} bytes at mtu {self.mtu}")
        if self._seen[index]:
            return 0
        self._seen[index] = 1
        self.placed += length
        if self._data is not None:
            if payload is None or len(payload) != length:
                raise ValueError(f"segment at {offset} has no payload of {length} bytes")
            self._data[off:off + length] = payload
        else:
            self._checksum = (self._checksum + _fold(off, digest)) & _MASK64
        return length

    @property
    def complete(self) -> bool:
        """Every byte placed (the transports' per-packet paths compare the two fields
        themselves: compiled, that is C, where a property is a Python attribute lookup)."""
        return self.placed == self.length

    def has(self, offset: int) -> bool:
        return bool(self._seen[offset // self.mtu])

    def checksum(self) -> int:
        if self._data is not None:
            return payload_sha256(self._data)  # hashlib reads the buffer: no 1 MB copy
        return self._checksum

    def data(self) -> bytes | None:
        return bytes(self._data) if self._data is not None else None
