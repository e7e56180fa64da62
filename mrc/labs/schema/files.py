"""Reading lab and sweep files, and finding the bundled ones by name.

A file that cannot be a lab (missing, a folder, binary, huge, not UTF-8, bad TOML) is refused
here with one line naming it, before any key is looked at. The bundled labs live in the
top-level ``labs/`` folder and ship as package data of ``mrc.bundled_labs``; sweep files
share the folder and are told apart by their content.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.checks import NAME_RE

MAX_LAB_BYTES = 4 * 1024 * 1024  # a lab file larger than this is not a lab file


def read_lab_text(path: Path, *, kind: str = "lab file", missing: str = "no such file",
                  max_bytes: int = MAX_LAB_BYTES) -> str:
    """The file's text, refusing what cannot be a lab (missing, directory, binary, huge);
    ``kind`` and ``missing`` word the errors for other TOML inputs such as sweep files."""
    shown = str(path)
    if not path.exists():
        raise LabError(missing, source=shown)
    if path.is_dir():
        raise LabError(f"is a directory, not a {kind}", source=shown)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LabError(f"cannot read: {exc.strerror or exc}", source=shown) from None
    if len(data) > max_bytes:
        raise LabError(f"{len(data):,} bytes is too large for a {kind}", source=shown)
    return decode_lab_bytes(data, shown)


def decode_lab_bytes(data: bytes, source: str | None) -> str:
    if b"\x00" in data:
        raise LabError("binary data (NUL bytes), not a TOML lab file", source=source)
    try:
        return data.decode("utf-8-sig")  # (a byte-order mark, as some editors write, is not text)
    except UnicodeDecodeError as exc:
        raise LabError(f"not UTF-8 text (bad byte at offset {exc.start}), not a TOML lab file",
                       source=source) from None


def parse_toml(text: str, source: str | None) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LabError(f"TOML syntax error: {exc}", source=source) from None
    except RecursionError:
        raise LabError("TOML syntax error: values nested too deeply", source=source) from None


def _bundled_dir() -> Any:
    """``labs/`` of the source checkout this ``mrc`` was imported from, else the installed
    ``mrc.bundled_labs`` package. The checkout wins: an editable install maps
    ``mrc.bundled_labs`` to the folder it was installed from, which is another checkout's
    labs when this one is imported through PYTHONPATH (a worktree)."""
    here = Path(__file__).resolve()
    root = here.parents[3]  # (mrc/labs/schema/files.py)
    if (root / "pyproject.toml").is_file() and (root / "labs").is_dir() and \
            here.is_relative_to(root / "mrc"):
        return root / "labs"
    from importlib.resources import files

    try:
        return files("mrc.bundled_labs")
    except ModuleNotFoundError:
        return root / "labs"


def _is_sweep(text: str) -> bool:
    """Sweep files (``mrc-lab sweep``) share the folder; they name a base ``lab``."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return "lab" in doc or "grid" in doc


def _bundled_files() -> list[tuple[str, bool]]:
    out = []
    for p in _bundled_dir().iterdir():
        if p.name.endswith(".toml") and NAME_RE.fullmatch(p.name[:-5]):
            out.append((p.name[:-5], _is_sweep(p.read_text(encoding="utf-8"))))
    return sorted(out)


def bundled_names() -> list[str]:
    """Names of the labs shipped in the package (``labs/*.toml``, sweeps excluded), sorted."""
    return [name for name, sweep in _bundled_files() if not sweep]


def bundled_sweep_names() -> list[str]:
    """Names of the sweep files shipped next to the labs."""
    return [name for name, sweep in _bundled_files() if sweep]


def find_bundled(name: str) -> Path | None:
    """The bundled lab file called ``name`` (with or without ``.toml``), if any."""
    stem = name[:-5] if name.endswith(".toml") else name
    if not NAME_RE.fullmatch(stem):
        return None
    candidate = _bundled_dir() / f"{stem}.toml"
    return Path(str(candidate)) if candidate.is_file() else None


def resolve_lab_path(lab: str | Path) -> Path:
    """A lab file path: an existing path as given, else a bundled lab of that name."""
    path = Path(lab)
    if path.exists():
        return path
    found = find_bundled(str(lab))
    if found is not None:
        return found
    known = ", ".join(bundled_names())
    raise LabError(f"no such lab file, and no bundled lab of that name (bundled: {known})",
                   source=str(lab))
