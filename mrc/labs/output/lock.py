"""One mrc-lab writer per output folder: an ``flock`` beside it (the rules are in
:mod:`mrc.labs.output.folder`)."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from mrc.labs.errors import LabError

_LOCK = ".mrc-lab.lock"


def why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


class FolderLock:
    """``flock`` on ``<parent>/.<name>.mrc-lab.lock``: one mrc-lab writer per folder.

    The kernel drops the lock when the process dies, so no stale lock survives a crash. The
    file is removed on release; a writer that opened it just before checks, once it holds the
    lock, that the file it locked is still the one at that path, and retries if not."""

    def __init__(self, folder: Path, option: str) -> None:
        self.path = folder.parent / f".{folder.name}{_LOCK}"
        self.option = option
        self.shown = str(folder)
        self._fd: int | None = None

    def acquire(self) -> None:
        import fcntl

        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise LabError(f"cannot write in {self.path.parent}: {why(exc)}",
                               self.option, self.shown) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode("ascii", "replace").strip() or "?"
                os.close(fd)
                raise LabError(f"another mrc-lab run (pid {holder}) is writing its results "
                               "there; wait for it to finish or choose another folder",
                               self.option, self.shown) from None
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    os.close(fd)
                    raise LabError(f"cannot lock: {why(exc)}", self.option,
                                   self.shown) from None
                # a filesystem without locks (some network mounts): go on unlocked
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # released and removed by its holder while we waited: try again
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            self._fd = fd
            return

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None
