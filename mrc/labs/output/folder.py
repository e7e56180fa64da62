"""Output folders: mrc-lab never loses a user's file and never leaves half a result set.

The rules (the README's "Outputs of a run" says the same to users):

* **A folder belongs to mrc-lab only if mrc-lab made it.** Every result folder holds
  ``mrc-lab-manifest.json``, which lists each file of the result set with its size and
  SHA-256. ``--out DIR`` may be a folder that does not exist yet (it is created), an empty
  folder, or a folder mrc-lab made whose files are all in its manifest. Anything else, a
  folder with files mrc-lab did not write (``--out .`` in a folder of your own), a file, the
  current folder, a mount point, is refused before the run with one line and exit status 2.
  mrc-lab never puts results into a subfolder you did not ask for, and it never deletes a
  file that is not in a manifest it wrote.
* **Results replace results as a whole.** A run writes into a hidden sibling
  ``.DIR.mrc-lab-tmp-*`` and the manifest last; only a complete set is renamed into place
  (the previous set is renamed aside first, then removed file by file from its manifest).
  SIGINT and SIGTERM are held back during those two renames, so an interrupted or crashed run
  leaves the previous complete results, or none, never a mix. A process killed outright
  (SIGKILL, power loss) between the two renames leaves the previous set in
  ``.DIR.mrc-lab-old-*``; the next run into DIR puts it back before doing anything else.
* **One writer per folder.** ``.DIR.mrc-lab.lock`` (an ``flock``, released by the kernel when
  the process dies, so a crash leaves no stale lock) is held from before the run until the
  results are in place; a second run into the same folder is refused with the first one's pid.

Everything is checked when the folder is opened, before any simulation: a path that cannot
be created or written (``/proc/x``, ``a-file/sub``, a read-only folder) costs the user one
line, not a run.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import secrets
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.output.durable import fsync_dir, fsync_file, signals_held
from mrc.labs.output.lock import FolderLock, why
from mrc.labs.output.manifest import (
    MANIFEST,
    MANIFEST_FORMAT,
    has_manifest,
    read_manifest,
    remove_result_set,
    sha256_file,
)

_TMP = ".mrc-lab-tmp-"
_OLD = ".mrc-lab-old-"


class OutputFolder:
    """One result folder, opened before the run and committed when the results are complete.

    ``with OutputFolder(path) as out: ...write files into out.staging...; out.commit(files)``
    leaves either the new complete set at ``path`` or the previous state untouched.
    ``own`` are extra file-name patterns that count as mrc-lab's own in ``path`` although no
    manifest lists them (a sweep's ``sweep-run.json`` and ``error.txt``); ``lock=False`` for
    folders whose parent already holds a lock (a sweep's runs)."""

    def __init__(self, target: str | Path, *, option: str = "--out",
                 own: Sequence[str] = (), lock: bool = True) -> None:
        self.shown = str(target)
        self.option = option
        self.own = tuple(own)
        self._lock_wanted = lock
        self.path = Path(os.path.abspath(os.path.expanduser(str(target))))
        self.staging: Path = self.path  # set by open()
        self.previous: dict[str, Any] | None = None  # the manifest of the set replaced
        self.committed = False
        self._lock: FolderLock | None = None
        self._made_parents: list[Path] = []
        self._opened = False

    def _error(self, problem: str) -> LabError:
        return LabError(problem, self.option, self.shown)

    # ----------------------------------------------------------------- opening
    def open(self) -> OutputFolder:
        """Check the folder, take the lock and create the staging folder (all before a run).
        Signals are held meanwhile, so an interrupt never leaves half of this behind."""
        if self._opened:
            return self
        with signals_held():
            self._check_place()
            self._make_parents()
            try:
                if self._lock_wanted:
                    self._lock = FolderLock(self.path, self.option)
                    self._lock.acquire()
                self._recover()
                self.previous = self._check_owned()
                staging = self.path.parent / \
                    f".{self.path.name}{_TMP}{os.getpid()}-{secrets.token_hex(4)}"
                try:
                    staging.mkdir()
                except OSError as exc:
                    raise self._error(f"cannot write in {self.path.parent}: {why(exc)}") \
                        from None
                self.staging = staging
            except BaseException:
                self._release()  # first: the lock file lives in the parent
                for folder in reversed(self._made_parents):
                    with contextlib.suppress(OSError):
                        folder.rmdir()
                raise
            self._opened = True
        return self

    def _check_place(self) -> None:
        path = self.path
        if path.parent == path:
            raise self._error("is the root of the filesystem; give a folder to create")
        try:
            cwd = Path.cwd().resolve()
        except OSError:
            cwd = None
        real = path.resolve()
        if cwd is not None and (real == cwd or real in cwd.parents):
            raise self._error("is the current folder (or holds it); results replace their "
                              "folder as a whole, so give a folder for them, e.g. "
                              "--out ./results")
        if path.is_symlink() and not path.exists():
            raise self._error("is a dangling symbolic link")
        if path.exists():
            if not path.is_dir():
                raise self._error("exists and is not a folder")
            if os.path.ismount(real):
                raise self._error("is a mount point; results replace their folder as a "
                                  "whole, so give a folder inside it")
        self.path = real  # a symlink's target is what gets replaced; the link keeps working

    def _make_parents(self) -> None:
        missing = []
        parent = self.path.parent
        while not parent.exists():
            missing.append(parent)
            if parent.parent == parent:
                break
            parent = parent.parent
        if parent.exists() and not parent.is_dir():
            raise self._error(f"{parent} is not a folder")
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:
                raise self._error(f"cannot create {folder}: {why(exc)}") from None
            self._made_parents.append(folder)
        if not os.access(self.path.parent, os.W_OK | os.X_OK):
            raise self._error(f"cannot write in {self.path.parent}: not writable")

    def _siblings(self, marker: str) -> list[Path]:
        prefix = f".{self.path.name}{marker}"
        try:
            return sorted(p for p in self.path.parent.iterdir() if p.name.startswith(prefix))
        except OSError:
            return []

    def _recover(self) -> None:
        """Under the lock: put back a set a killed run left aside, and clear its staging."""
        for old in self._siblings(_OLD):
            if not self.path.exists() and has_manifest(old):
                os.rename(old, self.path)  # the kill fell between the two renames
                print(f"mrc-lab: put back the earlier results in {self.shown} (a run was "
                      "killed while replacing them)", file=sys.stderr)
            else:
                remove_result_set(old, self.own)
        for tmp in self._siblings(_TMP):
            # a killed run's staging folder: hidden, named by us, written only by us
            shutil.rmtree(tmp, ignore_errors=True)

    def _check_owned(self) -> dict[str, Any] | None:
        """The manifest of the results already there (None: nothing there), or a refusal."""
        path = self.path
        if not path.exists():
            return None
        try:
            entries = sorted(os.listdir(path))
        except OSError as exc:
            raise self._error(f"cannot read: {why(exc)}") from None
        if not entries:
            return None
        try:
            manifest = read_manifest(path)
        except (OSError, ValueError) as exc:
            raise self._error(f"its {MANIFEST} is damaged ({exc}); move the folder away or "
                              "choose another") from None
        if manifest is None:
            if all(self._is_own(e) for e in entries):
                return {"files": []}
            raise self._error(f"is not empty and was not made by mrc-lab (no {MANIFEST}; "
                              f"it holds {_few(entries)}); choose a new or empty folder: "
                              "mrc-lab never deletes files it did not write")
        listed = {f["name"] for f in manifest["files"]} | {MANIFEST}
        foreign = [e for e in entries if e not in listed and not self._is_own(e)]
        if foreign:
            raise self._error(f"holds files mrc-lab did not write ({_few(foreign)}); move "
                              "them out or choose another folder: mrc-lab replaces its "
                              "results as a whole and never deletes files it did not write")
        return manifest

    def holds(self, path: str | Path) -> bool:
        """Whether ``path`` lies inside this folder (which is replaced as a whole)."""
        target = Path(os.path.abspath(os.path.expanduser(str(path)))).resolve()
        return target == self.path or self.path in target.parents

    def refuse_inside(self, path: str | Path | None, option: str) -> None:
        """A file another option writes during the run (a capture) cannot live in the result
        folder: the folder is replaced as a whole when the run ends."""
        if path is not None and self.holds(path):
            raise LabError(f"is inside the output folder {self.shown}, which mrc-lab replaces "
                           "as a whole when the run ends; write it beside that folder",
                           option, str(path))

    def _is_own(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.own)

    # ----------------------------------------------------------------- committing
    def commit(self, files: Iterable[Path], info: Mapping[str, Any] | None = None
               ) -> list[Path]:
        """Write the manifest of ``files`` (all inside :attr:`staging`), then put the set in
        place of whatever was at :attr:`path`. Returns the files' final paths."""
        if not self._opened or self.committed:
            raise RuntimeError("commit needs an open, uncommitted folder")
        names = []
        for f in files:
            f = Path(f)
            if f.parent.resolve() != self.staging.resolve():
                raise ValueError(f"{f} is not in the staging folder {self.staging}")
            if f.name not in names:
                names.append(f.name)
        present = set(os.listdir(self.staging))
        if present - set(names):
            raise ValueError(f"files written but not named: {sorted(present - set(names))}")
        from mrc import __version__

        entries = [{"name": n, "bytes": (self.staging / n).stat().st_size,
                    "sha256": sha256_file(self.staging / n)} for n in names]
        doc = {"format": MANIFEST_FORMAT, "written_by": f"mrc-lab {__version__}",
               **dict(info or {}), "files": entries}
        manifest = self.staging / MANIFEST
        manifest.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
        for n in [*names, MANIFEST]:
            fsync_file(self.staging / n)
        fsync_dir(self.staging)
        with signals_held():
            self._swap()
        self.committed = True
        return [self.path / n for n in names]

    def _swap(self) -> None:
        path = self.path
        old: Path | None = None
        if path.exists() and os.listdir(path):
            # someone may have added a file since open(): check again, now, under the lock
            try:
                self._check_owned()
            except LabError as exc:
                kept = self._keep_staging()
                raise LabError(f"{exc.message}; the new results are in {kept}", self.option,
                               self.shown) from None
            old = path.parent / f".{path.name}{_OLD}{os.getpid()}-{secrets.token_hex(4)}"
            os.rename(path, old)
        try:
            os.rename(self.staging, path)  # over an empty folder, or into the free name
        except OSError as exc:
            if old is not None:
                os.rename(old, path)  # put the previous set back
            kept = self._keep_staging()
            raise LabError(f"cannot put the results in place: {why(exc)}; they are in {kept}",
                           self.option, self.shown) from None
        fsync_dir(path.parent)
        if old is not None:
            leftover = remove_result_set(old, self.own)
            if leftover:
                print(f"mrc-lab: warning: kept {old}: it holds {_few(leftover)}, which no "
                      "manifest lists", file=sys.stderr)

    def _keep_staging(self) -> Path:
        """Give the staging folder a visible name, so the results are not lost."""
        kept = self.path.parent / f"{self.path.name}.mrc-lab-new-{secrets.token_hex(3)}"
        os.rename(self.staging, kept)
        self.staging = kept
        self.committed = True  # nothing left to clean up
        return kept

    # ----------------------------------------------------------------- closing
    def close(self) -> None:
        """Drop the staging folder if nothing was committed, and release the lock (signals
        held meanwhile: an interrupt during the clean-up must not leave half of it)."""
        with signals_held():
            self._release()  # first: the lock file lives in the parent
            if self._opened and not self.committed:
                shutil.rmtree(self.staging, ignore_errors=True)
                for folder in reversed(self._made_parents):
                    with contextlib.suppress(OSError):
                        folder.rmdir()  # only if still empty
            self._opened = False

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> OutputFolder:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _few(names: Sequence[str], n: int = 3) -> str:
    shown = ", ".join(names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")
