"""The two integrity checks' arithmetic: RoCE v2 ICRC constants and the UDP checksum sum.

Both checks cover only what switches never rewrite (see :mod:`mrc.wire`), so they verify after
every uSID shift, CE mark or trim re-mark. The ICRC is CRC-32 (``zlib.crc32``) over a masked
copy of inner IPv6 + UDP + BTH (``ICRC_MASK``) and the rest of the packet. The UDP checksum is
a one's-complement sum of 16-bit words: because 2**16 == 1 (mod 0xFFFF), it is the value of the
bytes as one big-endian integer modulo 0xFFFF, which Python computes in C; large buffers go
through numpy instead (:func:`sum16`), a whole burst through one numpy call
(:func:`sum16_many`). The compiled build sums every buffer with a C loop (``le_words``,
``checksum_c.h``: numpy's value for the whole 32-bit words), and masks the ICRC's header
bytes in C (:func:`masked_inner`).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

from mrc.packet import ENVELOPE_BYTES
from mrc.wire.layout import OFF_EXT, OFF_INNER

# ICRC: what it sees of the LRH (8 masked bytes) and of inner IPv6 + UDP + BTH.
CRC_LRH: Final = zlib.crc32(b"\xff" * 8)  # CRC state after the 8 masked LRH bytes
#: OR-ed over inner IPv6 + UDP + BTH (bytes 40..99) as one integer, it sets to ones what the
#: ICRC does not cover: traffic class + flow label (the version nibble stays 6), hop limit,
#: the UDP checksum and the BTH FECN/BECN/reserved byte.
ICRC_MASK: Final = int.from_bytes(
    b"\x0f\xff\xff\xff" + bytes(3) + b"\xff"  # inner IPv6 version/TC/flow label .. hop limit
    + bytes(32) + bytes(6) + b"\xff\xff"  # inner addresses, UDP ports and length, checksum
    + bytes(4) + b"\xff" + bytes(7), "big")  # BTH opcode..P_Key, FECN/BECN byte, QPN, PSN
MASKED_BYTES: Final = OFF_EXT - OFF_INNER  # 60
#: CRC-32 of any message followed by its own CRC, least-significant byte first (0x2144DF1C:
#: the empty message, CRC 0, followed by it).
CRC_RESIDUE: Final = zlib.crc32(bytes(4))

NP_MIN: Final = 512  # below this, int.from_bytes beats numpy's call overhead
_U4: Final = np.dtype("<u4")
_U64: Final = np.uint64
_frombuffer = np.frombuffer
_add_reduce = np.add.reduce
_add_reduceat = np.add.reduceat
_PADS: Final = (b"", b"\0\0\0", b"\0\0", b"\0")  # zeros up to the next multiple of 4
_from_bytes = int.from_bytes

_MASK: Final = ICRC_MASK.to_bytes(MASKED_BYTES, "big")

if cython.compiled:  # the same two in C (checksum_c.h)
    from cython.cimports.mrc.wire.checksum_c import le_words, or_bytes
else:
    def le_words(buf: bytes | bytearray | memoryview, start: int, m: int) -> int:
        """The sum of the little-endian 32-bit words of ``buf[start:start + m]`` (``m`` a
        multiple of 4 that the buffer holds)."""
        return int(_add_reduce(_frombuffer(buf, _U4, m >> 2, start), 0, _U64))

    def or_bytes(buf: bytes | bytearray | memoryview, start: int, mask: bytes) -> bytes:
        """``buf[start:start + len(mask)]`` OR-ed with ``mask``."""
        n = len(mask)
        return (_from_bytes(buf[start:start + n], "big") | _from_bytes(mask, "big")).to_bytes(
            n, "big")


@cython.ccall
@cython.annotation_typing(True)
def masked_inner(buf: Any) -> bytes:
    """What the ICRC covers of inner IPv6 + UDP + BTH (``buf[OFF_INNER:OFF_EXT]``): the bytes
    with the fields it does not cover set to ones (``ICRC_MASK``)."""
    if len(buf) < OFF_EXT:
        raise ValueError(f"{len(buf)} bytes end before the BTH does")
    return or_bytes(buf, OFF_INNER, _MASK)


@cython.ccall
@cython.annotation_typing(True)
def sum16(buf: Any, start: cython.Py_ssize_t = 0) -> Any:
    """An integer congruent (mod 0xFFFF) to the big-endian 16-bit word sum of ``buf[start:]``,
    padded with a zero byte when odd (``start`` is an even offset of the checksummed data).

    Large buffers: numpy sums little-endian 32-bit words (2**16 == 1 mod 0xFFFF, so a 32-bit
    word is congruent to the sum of its two 16-bit halves), and a byte swap is multiplication
    by 256 modulo 0xFFFF (RFC 1071's byte-order independence). Bytes past the last whole
    32-bit word are added as a big-endian integer. ``start`` is numpy's buffer offset: no
    slice or memoryview is made for it."""
    n: cython.Py_ssize_t = len(buf) - start
    if n < NP_MIN and not cython.compiled:  # (compiled: the C loop is cheaper at any length)
        v = _from_bytes(buf[start:] if start else buf, "big")
        return v << 8 if n & 1 else v
    m: cython.Py_ssize_t = n & ~3
    s = le_words(buf, start, m) << 8
    if m == n:
        return s
    v = _from_bytes(buf[start + m:], "big")
    return s + (v << 8 if n & 1 else v)


def sum16_many(bufs: Sequence[object], start: int) -> list[int | None]:
    """``sum16(buf, start)`` of each ``bytes`` buffer at least as long as the envelope, from
    one numpy reduction over their concatenation (None for the others: summed alone).

    Each buffer is padded with zeros to a multiple of 4 bytes, so every one (and its
    ``start``, a multiple of 4) begins on a 32-bit word; ``reduceat`` then sums the words
    from each ``start`` to the buffer's end (and, unused, each buffer's first ``start``
    bytes).

    Compiled, each buffer is summed on its own in C (``le_words``): no concatenation, and no
    numpy call to pay for."""
    if cython.compiled:
        sums: list[int | None] = [None] * len(bufs)
        for i, buf in enumerate(bufs):
            if type(buf) is bytes and len(buf) >= ENVELOPE_BYTES:
                sums[i] = sum16(buf, start)
        return sums
    parts: list[bytes] = []
    bounds: list[int] = []
    which: list[int] = []
    pos = 0
    for i, buf in enumerate(bufs):
        if type(buf) is not bytes or len(buf) < ENVELOPE_BYTES:
            continue
        n = len(buf)
        parts.append(buf)
        bounds.append((pos + start) >> 2)
        pos += n
        if n & 3:
            parts.append(_PADS[n & 3])
            pos += 4 - (n & 3)
        bounds.append(pos >> 2)
        which.append(i)
    out: list[int | None] = [None] * len(bufs)
    if which:
        bounds.pop()  # the last range runs to the end
        words = _add_reduceat(_frombuffer(b"".join(parts), _U4), bounds, 0, _U64)
        for i, total in zip(which, words[::2].tolist(), strict=True):
            out[i] = total << 8
    return out
