"""Writes that a crash or a signal cannot tear: a file replaced atomically, ``fsync`` of a
file and of a folder (so a rename is on disk), and signals held back while a result set is
swapped in (two renames that must both happen).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Signals held back while the result set is swapped in (the swap is two renames).
_HELD = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP"))
              if s is not None)


def replace_file(path: Path, data: bytes | str) -> Path:
    """Write ``path`` atomically (a temporary sibling renamed over it): readers see the old
    bytes or the new ones, never a torn file. For files that live outside result sets
    (a sweep's table and markers)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(3)}.tmp"
    try:
        with tmp.open("wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP back for the duration, then deliver them.

    Python runs signal handlers in the main thread only, between bytecodes, so the handlers
    are swapped for one that just remembers the signal (blocking the signal with a mask would
    not do: the kernel may hand it to another thread and Python still trips the main one).
    In any other thread no handler can interrupt the swap, so there is nothing to hold."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def remember(signum: int, frame: object) -> None:
        caught.append(signum)

    previous: dict[int, Any] = {}
    for sig in _HELD:
        with contextlib.suppress(ValueError, OSError):
            previous[sig] = signal.signal(sig, remember)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)  # now, to the handlers put back
