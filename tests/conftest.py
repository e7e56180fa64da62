"""Shared pytest configuration.

* Tests marked ``slow`` run only with ``--runslow``.
* Hypothesis profiles: ``ci`` (the default) is derandomized with a fixed number of examples,
  so every run tries the same cases; ``MRC_HYPOTHESIS_PROFILE=thorough`` tries ten times as
  many, freshly drawn each run (a failure prints the seed and blob that reproduce it).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=100,
                          print_blob=True)
settings.register_profile("thorough", derandomize=False, deadline=None, max_examples=1000,
                          print_blob=True)
settings.load_profile(os.environ.get("MRC_HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
