"""Loading a script of ``benchmarks/`` as a module, for the tests of that script.

Only a benchmark's own tests load it: a scenario that a test needs lives in the product
(for example :mod:`mrc.acceptance`), never in ``benchmarks/``, which is not on ``sys.path``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str) -> ModuleType:
    """``benchmarks/<name>.py``, freshly executed (registered under ``name`` while it runs:
    a dataclass of the script looks its module up there)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
