"""Two tiny eBPF programs the kernel fabric needs where Linux has no ready-made behaviour.

* **uA** (:func:`ua_shift`, an ``LWT_XMIT`` program on the port uSID's route): RFC 9800
  gives the uSID that names a T0's downlink no next-C-SID shift of its own when it is the last
  one, and Linux's End.X then wants a segment routing header and drops the packet. The plan
  (``topology.tables``: "uA: the T0 shifts and sends out downlink j") shifts it away. This
  program does exactly that shift on the route's way out: destination bytes 30..39 move to
  28..37 and 38..39 become zero, as ``topology.usid.shift`` does, so the host receives the
  address the plan says (``fcbb:P::``).
* **random loss** (:func:`random_drop`, a ``SCHED_CLS`` direct-action program on a port's
  egress): drop each packet with probability p (``bpf_get_prandom_u32`` below p x 2^32), for
  kernels without ``sch_netem`` (it is a module many kernels do not load, and this machine
  does not have). The kernel's generator is not seeded: loss patterns differ between runs.

They are written here as instructions (a handful each) rather than compiled C, so the runtime
needs no compiler and no object files; the kernel's verifier checks them when they load. If
the kernel refuses (no BPF, no permission), the fabric falls back: uA to a plain route that
leaves the port uSID for the host's NIC to consume, loss faults to "unsupported".
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

# program types and helpers (uapi/linux/bpf.h)
PROG_SCHED_CLS = 3
PROG_LWT_XMIT = 12
_HELPER_PRANDOM = 7
_HELPER_STORE_BYTES = 9
_HELPER_LOAD_BYTES = 26
_BPF_PROG_LOAD = 5
_SYSCALL_BPF = {"x86_64": 321, "aarch64": 280, "arm64": 280}
TC_ACT_OK, TC_ACT_SHOT = 0, 2
BPF_OK, BPF_DROP = 0, 2

_INSN = struct.Struct("<BBhi")
_R0, _R1, _R2, _R3, _R4, _R5, _R6, _R10 = 0, 1, 2, 3, 4, 5, 6, 10


class BpfError(OSError):
    """The kernel refused a program (the verifier's log is in the message)."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return _INSN.pack(code, (src << 4) | dst, off, imm)


def mov_imm(dst: int, imm: int) -> bytes:
    return _insn(0xB7, dst, imm=imm)


def mov_reg(dst: int, src: int) -> bytes:
    return _insn(0xBF, dst, src)


def add_imm(dst: int, imm: int) -> bytes:
    return _insn(0x07, dst, imm=imm)


def _s32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def ld_imm64(dst: int, value: int) -> bytes:
    """A 64-bit constant: two instruction slots, low then high 32 bits."""
    return _insn(0x18, dst, imm=_s32(value)) + _insn(0, imm=_s32(value >> 32))


def store_half(base: int, off: int, imm: int) -> bytes:
    return _insn(0x6A, base, off=off, imm=imm)  # *(u16 *)(base + off) = imm


def call(helper: int) -> bytes:
    return _insn(0x85, imm=helper)


def jge_reg(dst: int, src: int, off: int) -> bytes:
    return _insn(0x3D, dst, src, off=off)  # if dst >= src (unsigned) goto +off


def jne_imm(dst: int, imm: int, off: int) -> bytes:
    return _insn(0x55, dst, off=off, imm=imm)


def exit_() -> bytes:
    return _insn(0x95)


# ---------------------------------------------------------------------- the programs
def random_drop_insns(probability: float) -> bytes:
    """``return prandom_u32() < p * 2**32 ? TC_ACT_SHOT : TC_ACT_OK``."""
    threshold = min(max(int(round(probability * 2**32)), 0), 2**32)
    return b"".join((
        call(_HELPER_PRANDOM),          # r0 = random u32
        ld_imm64(_R1, threshold),       # r1 = p * 2^32
        jge_reg(_R0, _R1, 2),           # if r0 >= r1: pass
        mov_imm(_R0, TC_ACT_SHOT),
        exit_(),
        mov_imm(_R0, TC_ACT_OK),
        exit_(),
    ))


def ua_shift_insns() -> bytes:
    """Shift the uSID carrier of the IPv6 destination by 16 bits (the packet starts at its
    IPv6 header on an LWT xmit hook): bytes 30..39 to 28..37, zeros into 38..39."""
    return b"".join((
        mov_reg(_R6, _R1),              # r6 = skb
        mov_imm(_R2, 30),
        mov_reg(_R3, _R10), add_imm(_R3, -16),
        mov_imm(_R4, 10),
        call(_HELPER_LOAD_BYTES),       # fp[-16..-7] = bytes 30..39
        jne_imm(_R0, 0, 17),            # short packet: drop
        mov_reg(_R1, _R6), mov_imm(_R2, 28),
        mov_reg(_R3, _R10), add_imm(_R3, -16),
        mov_imm(_R4, 10), mov_imm(_R5, 0),
        call(_HELPER_STORE_BYTES),      # bytes 28..37 = fp[-16..-7]
        store_half(_R10, -4, 0),
        mov_reg(_R1, _R6), mov_imm(_R2, 38),
        mov_reg(_R3, _R10), add_imm(_R3, -4),
        mov_imm(_R4, 2), mov_imm(_R5, 0),
        call(_HELPER_STORE_BYTES),      # bytes 38..39 = 0
        mov_imm(_R0, BPF_OK),
        exit_(),
        mov_imm(_R0, BPF_DROP),
        exit_(),
    ))


# ---------------------------------------------------------------------- loading
_attr = struct.Struct("=IIQQIIQII16sII")


def load(prog_type: int, insns: bytes, name: str) -> int:
    """Load a program; returns its file descriptor (the caller closes it once attached)."""
    number = _SYSCALL_BPF.get(platform.machine())
    if number is None:
        raise BpfError(0, f"no bpf() syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    code = ctypes.create_string_buffer(insns, len(insns))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(1 << 16)
    attr = _attr.pack(prog_type, len(insns) // 8, ctypes.addressof(code),
                      ctypes.addressof(license_), 1, len(log), ctypes.addressof(log), 0, 0,
                      name.encode()[:15], 0, 0)
    buf = ctypes.create_string_buffer(attr + bytes(128 - len(attr)), 128)
    fd = libc.syscall(number, _BPF_PROG_LOAD, buf, 128)
    if fd < 0:
        err = ctypes.get_errno()
        text = log.value.decode(errors="replace").strip().splitlines()
        raise BpfError(err, f"bpf {name}: {os.strerror(err)}" + (f" ({text[-1]})" if text else ""))
    return int(fd)


def random_drop(probability: float) -> int:
    return load(PROG_SCHED_CLS, random_drop_insns(probability), "mrc_loss")


def ua_shift() -> int:
    return load(PROG_LWT_XMIT, ua_shift_insns(), "mrc_ua")
