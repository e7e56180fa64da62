"""How every ``mrc-lab`` command ends: its exit status, and the one line that says why.

Exit status: 0 when the command completed (a transport's job failing is a result), 2 for bad
input (one line on stderr naming the file, the key and the problem, no traceback), 1 for an
internal error (our bug: the traceback is printed, then one summary line), 130 / 143 when
interrupted by SIGINT / SIGTERM (the previous results, if any, are left as they were).
:func:`guarded` runs a command's body under these rules; :func:`parse_number` reads a
numeric option as a :class:`LabError` of that option when it is not one.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from mrc.labs.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, LabError

#: Where results go without --out: ``./mrc-lab-out/<name>/``.
DEFAULT_OUT_ROOT = Path("mrc-lab-out")
EXIT_SIGINT = 128 + 2
EXIT_SIGTERM = 128 + 15


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so cleanup runs as for Ctrl-C."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def guarded(fn: Callable[[], int | None]) -> None:
    """Map outcomes to exit codes: LabError -> 2 (one line), other exceptions -> 1."""
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # not the main thread (tests): leave the default
        pass
    try:
        code = fn() or 0
    except LabError as exc:
        click.echo(f"mrc-lab: error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt as exc:
        _interrupted(exc)
    except BrokenPipeError:
        # the reader went away (`mrc-lab labs | head`): not an error; silence the final flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except (click.exceptions.Exit, click.ClickException, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 (the point is to catch everything else)
        interrupt = _interrupt_behind(exc)
        if interrupt is not None:
            _interrupted(interrupt)
        traceback.print_exc(file=sys.stderr)
        text = " ".join(str(exc).split())
        click.echo(f"mrc-lab: internal error (a bug, please report it with the traceback "
                   f"above): {type(exc).__name__}: {text}", err=True)
        sys.exit(EXIT_INTERNAL)
    sys.exit(code)


def _interrupted(exc: KeyboardInterrupt) -> NoReturn:
    click.echo("mrc-lab: interrupted; earlier results, if any, are as they were", err=True)
    sys.exit(EXIT_SIGTERM if isinstance(exc, _Terminated) else EXIT_SIGINT)


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or SIGTERM) that caused ``exc``, if one did. A signal that lands while a C
    extension initialises its module (pandas, imported late, when the tables are written)
    comes out as an ImportError or SystemError whose cause or context is the interrupt: that
    is an interrupt, not an internal error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def parse_number(text: str | None, kind: type, option: str) -> Any:
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        word = "an integer" if kind is int else "a number"
        raise LabError(f"expected {word}, got {text!r}", option) from None
