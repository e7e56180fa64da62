"""The simulator benchmark suite (issue 6); the same as ``mrc-lab bench``.

    python benchmarks/bench_suite.py [--scenario perm128|perm1024|planes8|labs|lab:NAME]...
                                     [--repeat N] [--json] [--output FILE] [--in-process]

See ``mrc/bench.py`` for the scenarios and what each number means.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's mrc

from mrc.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
