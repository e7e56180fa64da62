"""The kernel runtime's signal handling keeps the CLI's: SIGTERM still exits 143, not 130
(no root needed: only the handlers are exercised)."""

from __future__ import annotations

import os
import signal

import pytest

from mrc.labs.run.kernel import _signals_interrupt


class _Cli(Exception):
    pass


def _raise_cli(signum: int, frame: object) -> None:
    raise _Cli(signum)


def test_sigterm_goes_to_the_handler_installed_before() -> None:
    before = signal.signal(signal.SIGTERM, _raise_cli)
    try:
        with pytest.raises(_Cli), _signals_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is _raise_cli  # restored
    finally:
        signal.signal(signal.SIGTERM, before)


def test_without_one_a_signal_interrupts() -> None:
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        with pytest.raises(KeyboardInterrupt), _signals_interrupt():
            os.kill(os.getpid(), signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, before)
