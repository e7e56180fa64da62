"""Build, inspect or remove the optional mypyc build of the simulator's hot modules.

    python benchmarks/build_compiled.py build    # needs mypy (mypyc) and a C compiler
    python benchmarks/build_compiled.py status
    python benchmarks/build_compiled.py clean

See ``mrc/_accel.py``: the build is used only while it matches the sources exactly, and
``MRC_PURE_PYTHON=1`` turns it off.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's mrc

from mrc import _accel  # noqa: E402

if __name__ == "__main__":
    sys.exit(_accel.main())
