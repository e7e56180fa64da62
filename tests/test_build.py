"""The compiled core (mrc/_build.py, setup.py): which build runs, the switch that forces pure
Python, and the rule that the compiled set is all or nothing.

Whether both builds give the same bytes is tested where the determinism is
(``tests/test_determinism.py``); these tests hold the mechanism itself, in child processes
(the choice is made once per process, when ``mrc`` is imported).
"""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mrc
from mrc import _build

ROOT = Path(__file__).resolve().parents[1]
# children run with -P: they import the same mrc as this process (installed, or on
# PYTHONPATH), never the checkout's sources by accident of their working directory
PROBE = ("import json, mrc, mrc.sim.engine as e, mrc.packet as p, mrc._build as b; "
         "print(json.dumps([b.BUILD, b.REASON, e.__file__, p.__file__]))")


def _probe(env: dict[str, str]) -> tuple[str, str, str, str]:
    import json

    full = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-P", "-c", PROBE], env=full, capture_output=True,
                         text=True, check=True)
    build, reason, engine, packet = json.loads(out.stdout.strip().splitlines()[-1])
    return build, reason, engine, packet


def test_every_compiled_module_has_its_declarations_and_source() -> None:
    """The set ``setup.py`` compiles is ``COMPILED``: each module is a .py (the one source)
    with a .pxd beside it, and no .pxd lies elsewhere (a declaration nobody compiles)."""
    for name in _build.COMPILED:
        source = _build.module_path(name)
        assert source.is_file(), name
        assert source.with_suffix(".pxd").is_file(), name
    declared = {str(p.relative_to(ROOT).with_suffix("")).replace(os.sep, ".")
                for p in (ROOT / "mrc").rglob("*.pxd")}
    assert declared == set(_build.COMPILED)


def test_setup_compiles_that_set() -> None:
    """setup.py reads ``COMPILED`` from mrc/_build.py (without importing the package)."""
    text = (ROOT / "setup.py").read_text(encoding="utf-8")
    namespace: dict[str, object] = {"__file__": str(ROOT / "setup.py"), "__name__": "probe"}
    exec(compile(text.split("\nsetup(")[0], "setup.py", "exec"), namespace)  # not setup()
    assert namespace["compiled_modules"]() == list(_build.COMPILED)  # type: ignore[operator]


def test_pure_python_is_forced_by_the_environment() -> None:
    build, reason, engine, packet = _probe({_build.ENV_PURE: "1"})
    assert build == "pure" and _build.ENV_PURE in reason
    assert engine.endswith("engine.py") and packet.endswith("packet.py")


def test_the_default_is_whatever_is_installed() -> None:
    build, _, engine, _ = _probe({_build.ENV_PURE: "0"})
    installed = all(_build.extension_path(m) for m in _build.COMPILED)
    assert build == ("compiled" if installed else "pure")
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    assert engine.endswith(suffixes) == installed


def test_version_says_which_build_runs() -> None:
    out = subprocess.run([sys.executable, "-P", "-m", "mrc.cli", "--version"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, _build.ENV_PURE: "1"})
    assert out.stdout.startswith("mrc-lab ")
    assert "pure Python (MRC_PURE_PYTHON is set)" in out.stdout


def test_an_incomplete_compiled_core_runs_pure_python(tmp_path: Path) -> None:
    """A damaged install (one extension missing) must not mix compiled and pure modules:
    everything runs from source, with a warning."""
    if not all(_build.extension_path(m) for m in _build.COMPILED):
        pytest.skip("no compiled core installed")
    import shutil

    installed = Path(mrc.__file__).resolve().parent.parent  # this process's mrc, topology
    for package in ("mrc", "topology"):
        shutil.copytree(installed / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    ports = _build.extension_path("mrc.sim.ports")
    assert ports is not None
    (tmp_path / ports.relative_to(installed)).unlink()
    code = "import warnings; warnings.simplefilter('always'); " + PROBE
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                         check=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path),
                              _build.ENV_PURE: ""})
    assert "incomplete compiled core (mrc.sim.ports missing)" in out.stderr
    assert '"pure"' in out.stdout and "engine.py" in out.stdout
