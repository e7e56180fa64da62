"""A result set's manifest: ``mrc-lab-manifest.json`` lists every file of the set with its
size and SHA-256, so a folder is mrc-lab's only when a manifest it wrote says so, and only
the files a manifest lists are ever deleted (:mod:`mrc.labs.output.folder` has the rules).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MANIFEST = "mrc-lab-manifest.json"
MANIFEST_FORMAT = 1


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of a result folder, or None when it has none (a folder of someone else's).

    Raises :class:`ValueError` when a manifest is there but damaged."""
    path = folder / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    doc = json.loads(text)
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list) or not all(
            isinstance(f, dict) and isinstance(f.get("name"), str) for f in files):
        raise ValueError("no file list")
    return doc


def verify_result_set(folder: Path) -> dict[str, Any]:
    """Check that ``folder`` holds exactly one complete result set: its manifest, and every
    file the manifest lists with the size and SHA-256 it records, and nothing else. Returns
    the manifest; raises :class:`ValueError` naming the first problem (tests and users who
    want to be sure call this)."""
    manifest = read_manifest(folder)
    if manifest is None:
        raise ValueError(f"{folder}: no {MANIFEST}")
    listed = {f["name"]: f for f in manifest["files"]}
    present = set(os.listdir(folder)) - {MANIFEST}
    if present != set(listed):
        raise ValueError(f"{folder}: files {sorted(present)} but the manifest lists "
                         f"{sorted(listed)}")
    for name, entry in listed.items():
        path = folder / name
        if path.stat().st_size != entry["bytes"] or sha256_file(path) != entry["sha256"]:
            raise ValueError(f"{folder}: {name} differs from its manifest entry")
    return manifest


def has_manifest(folder: Path) -> bool:
    try:
        return read_manifest(folder) is not None
    except (OSError, ValueError):
        return False


def remove_result_set(folder: Path, own: Sequence[str]) -> list[str]:
    """Delete the files a manifest in ``folder`` lists (and the manifest, and files matching
    ``own``), then the folder if that emptied it. Returns what was left: never deleted."""
    try:
        manifest = read_manifest(folder)
    except (OSError, ValueError):
        manifest = None
    listed = {f["name"] for f in manifest["files"]} if manifest else set()
    for name in sorted(os.listdir(folder)):
        if name in listed or any(fnmatch.fnmatchcase(name, p) for p in own):
            with contextlib.suppress(OSError):
                (folder / name).unlink()
    with contextlib.suppress(OSError):
        (folder / MANIFEST).unlink()
    left = sorted(os.listdir(folder))
    if not left:
        folder.rmdir()
    return left
