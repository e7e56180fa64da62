"""Network namespaces: create, enter, delete, and find what a dead run left behind.

A kernel fabric is one namespace per switch and per host. They are made the way ``ip netns
add`` makes them (a new namespace bind-mounted on ``/run/netns/NAME``), but from this process
with ``unshare``/``setns`` on the calling thread, so 80 namespaces cost milliseconds instead of
80 ``ip`` processes or forks. Entering a namespace (:func:`enter`) moves only the calling
thread, and every socket opened meanwhile stays in that namespace: this is how one process
talks netlink to every switch and opens one packet socket per host.

Every name carries a run-specific prefix ``mrck-<token>-`` and the run holds an exclusive
``flock`` on ``/run/mrc-kernel/<token>.lock`` while it lives. The kernel drops that lock when
the process dies, however it dies (SIGKILL included), so a namespace whose token has no held
lock belongs to a dead run: :func:`cleanup_stale` deletes those and nothing else (two live
runs never touch each other's fabric). Deleting the namespaces is the whole teardown: the veths,
qdiscs and routes inside them go with them, and nothing is ever created in the caller's own
namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

NETNS_DIR = Path("/run/netns")
LOCK_DIR = Path("/run/mrc-kernel")
#: Every namespace this package makes starts with this.
PREFIX = "mrck-"

_CLONE_NEWNET = 0x40000000
_MS_BIND = 4096
_MS_REC = 16384
_MS_SHARED = 1 << 20
_MNT_DETACH = 2
_CAP_NET_ADMIN = 12
_CAP_SYS_ADMIN = 21

_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str, name: str = "") -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}", name or None)


# ---------------------------------------------------------------------- what is missing
def missing_privileges() -> str | None:
    """Why this process cannot build a kernel fabric (None when it can).

    Namespaces need CAP_SYS_ADMIN (unshare, mount) and the fabric CAP_NET_ADMIN (links,
    routes, qdiscs); both come with root. SRv6 support is checked separately, by installing
    a seg6local route in a scratch namespace (:mod:`mrc.kernel.fabric`)."""
    if not hasattr(os, "geteuid") or not Path("/proc/self/status").exists():
        return "the kernel runtime needs Linux"
    caps = _effective_caps()
    need = [name for bit, name in ((_CAP_NET_ADMIN, "CAP_NET_ADMIN"),
                                   (_CAP_SYS_ADMIN, "CAP_SYS_ADMIN")) if not caps >> bit & 1]
    if need:
        return f"the kernel runtime needs root ({' and '.join(need)} missing)"
    if not Path("/proc/sys/net/ipv6").exists():
        return "the kernel runtime needs IPv6 (net.ipv6 is not available)"
    return None


def _effective_caps() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


# ---------------------------------------------------------------------- primitives
def path(name: str) -> Path:
    return NETNS_DIR / name


def exists(name: str) -> bool:
    return path(name).exists()


def listed(prefix: str = PREFIX) -> list[str]:
    """Names in /run/netns starting with ``prefix`` (every namespace of ours by default)."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def _share_rundir() -> None:
    """Make /run/netns a shared mount point, as ``ip netns add`` does, so the namespace mounts
    made here are visible to every other mount namespace (``ip netns exec`` included)."""
    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    c = _c()
    target = str(NETNS_DIR).encode()
    if c.mount(b"none", target, None, _MS_SHARED | _MS_REC, None) == 0:
        return
    if ctypes.get_errno() != errno.EINVAL:
        _check(-1, "cannot share /run/netns")
    # not a mount point yet: bind it onto itself, then share it
    _check(c.mount(target, target, b"none", _MS_BIND | _MS_REC, None), "bind /run/netns")
    _check(c.mount(b"none", target, None, _MS_SHARED | _MS_REC, None), "share /run/netns")


_rundir_ready = False


def create(name: str) -> None:
    """A new, empty network namespace mounted on /run/netns/``name`` (only ``lo``, down)."""
    global _rundir_ready
    if not _rundir_ready:
        _share_rundir()
        _rundir_ready = True
    target = path(name)
    os.close(os.open(target, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
    c = _c()
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            _check(c.unshare(_CLONE_NEWNET), "unshare", name)
            _check(c.mount(b"/proc/thread-self/ns/net", str(target).encode(), b"none",
                           _MS_BIND, None), "mount", name)
        finally:
            _check(c.setns(home, _CLONE_NEWNET), "setns back", name)
    except BaseException:
        with contextlib.suppress(OSError):
            c.umount2(str(target).encode(), _MNT_DETACH)
            target.unlink()
        raise
    finally:
        os.close(home)


def delete(name: str) -> bool:
    """Unmount and remove /run/netns/``name``; the kernel frees the namespace (and every
    device in it) once no socket or process holds it. False if it did not exist."""
    target = path(name)
    if not target.exists():
        return False
    _c().umount2(str(target).encode(), _MNT_DETACH)
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    return True


@contextlib.contextmanager
def enter(name: str) -> Iterator[None]:
    """Run the block with the calling thread in namespace ``name`` (and back afterwards)."""
    c = _c()
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        fd = os.open(path(name), os.O_RDONLY)
        try:
            _check(c.setns(fd, _CLONE_NEWNET), "setns", name)
        finally:
            os.close(fd)
        try:
            yield
        finally:
            _check(c.setns(home, _CLONE_NEWNET), "setns back", name)
    finally:
        os.close(home)


def sysctl(key: str, value: int | str) -> None:
    """Write ``net.`` sysctl ``key`` (dotted) of the namespace the calling thread is in."""
    Path("/proc/sys", *key.split(".")).write_text(f"{value}\n", encoding="ascii")


# ---------------------------------------------------------------------- runs
class Run:
    """The namespaces of one run: their prefix, and the lock that says the run is alive."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token or secrets.token_hex(3)
        self.prefix = f"{PREFIX}{self.token}-"
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        self.lock_path = LOCK_DIR / f"{self.token}.lock"
        self._lock: int | None = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock)
            self._lock = None
            raise
        os.write(self._lock, f"{os.getpid()}\n".encode())

    def name(self, element: str) -> str:
        """The namespace name of fabric element ``element`` (``p3.t0.1``, ``h5``)."""
        return self.prefix + element

    def namespaces(self) -> list[str]:
        return listed(self.prefix)

    def delete_all(self) -> int:
        """Delete every namespace of this run; returns how many there were."""
        found = self.namespaces()
        for name in found:
            delete(name)
        return len(found)

    def release(self) -> None:
        """Drop the lock and its file (after :meth:`delete_all`; idempotent)."""
        if self._lock is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.lock_path.unlink()
        os.close(self._lock)
        self._lock = None

    @property
    def alive(self) -> bool:
        return self._lock is not None


def _token_of(name: str) -> str | None:
    rest = name[len(PREFIX):]
    token, sep, _ = rest.partition("-")
    return token if sep and token else None


def _held(token: str) -> bool:
    """Whether a live process holds run ``token``'s lock."""
    lock = LOCK_DIR / f"{token}.lock"
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the lock we may just have taken
    return False


def cleanup_stale() -> list[str]:
    """Delete the namespaces (and lock files) of runs whose process is gone; returns the
    namespaces deleted. Runs that are alive are left alone."""
    deleted = []
    tokens: dict[str, bool] = {}
    for name in listed():
        token = _token_of(name)
        if token is None:
            continue
        if token not in tokens:
            tokens[token] = _held(token)
        if not tokens[token] and delete(name):
            deleted.append(name)
    if LOCK_DIR.exists():
        for lock in LOCK_DIR.glob("*.lock"):
            token = lock.stem
            if not tokens.get(token, False) and not _held(token):
                with contextlib.suppress(FileNotFoundError):
                    lock.unlink()
    return deleted
