"""How ``mrc-lab`` exits when a run is interrupted (``mrc.labs.cli.exits.guarded``): Ctrl-C and
SIGTERM give 130 and 143 with one line, also when the interrupt surfaced as another exception
(a signal landing while a C extension initialises its module, pandas's say, comes out as an
ImportError or SystemError caused by it); every other exception is an internal error."""

from __future__ import annotations

import pytest

from mrc.labs.cli import exits as cli


def _exit_code(exc: BaseException, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    def fn() -> int:
        raise exc

    with pytest.raises(SystemExit) as done:
        cli.guarded(fn)
    return int(done.value.code), capsys.readouterr().err  # type: ignore[arg-type]


def _import_interrupted(interrupt: KeyboardInterrupt) -> SystemError:
    """What CPython raises when a signal lands inside a C module's init: the interrupt,
    wrapped in an ImportError, inside a SystemError (as pandas's Cython modules do)."""
    try:
        try:
            try:
                raise interrupt
            except KeyboardInterrupt as exc:
                raise ImportError('PyCapsule_Import could not import module "pandas"') from exc
        except ImportError:
            raise SystemError("returned a result with an exception set")  # noqa: B904
    except SystemError as exc:
        return exc


def test_ctrl_c_and_sigterm(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _exit_code(KeyboardInterrupt(), capsys)
    assert code == cli.EXIT_SIGINT and err.startswith("mrc-lab: interrupted")
    code, err = _exit_code(cli._Terminated(), capsys)
    assert code == cli.EXIT_SIGTERM and len(err.splitlines()) == 1


def test_an_interrupt_inside_an_import_is_an_interrupt(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _exit_code(_import_interrupted(KeyboardInterrupt()), capsys)
    assert code == cli.EXIT_SIGINT
    assert err.splitlines() == ["mrc-lab: interrupted; earlier results, if any, are as they were"]
    code, _ = _exit_code(_import_interrupted(cli._Terminated()), capsys)
    assert code == cli.EXIT_SIGTERM


def test_other_exceptions_stay_internal_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _exit_code(ImportError("no module named pandas"), capsys)
    assert code == cli.EXIT_INTERNAL and "internal error" in err
