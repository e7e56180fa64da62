"""The layering of docs/architecture.md holds: import-linter's contracts in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter not installed (pip install '.[test]')")
    done = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_foundation_modules_import_nothing_of_ours() -> None:
    """mrc.units, mrc.ev and mrc.packet sit below topology: they may import only the
    standard library, so any layer can use them without a cycle."""
    for name in ("units", "ev", "packet"):
        source = (ROOT / "mrc" / f"{name}.py").read_text()
        imports = [line for line in source.splitlines()
                   if line.startswith(("import ", "from ")) and "__future__" not in line]
        ours = [line for line in imports if " mrc" in line or " topology" in line]
        assert not ours, (name, ours)


def test_every_package_ships() -> None:
    """`pip install .` installs the packages listed in pyproject.toml: a package missing from
    the list would work from a checkout and be absent from an install."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for top in ("mrc", "topology") for init in (ROOT / top).rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
