"""Errors of the labs layer, and the exit codes the CLI maps them to.

Bad input is the user's to fix, so it must read as one line that names the file, the
dotted key path and the problem (exit status 2). Everything else is our bug (status 1).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2


class LabError(ValueError):
    """Bad lab input. ``key`` is the dotted path of the offending key, when there is one."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, key: str | None = None, source: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.key = key
        self.source = source

    def with_source(self, source: str | None) -> LabError:
        """The same error, attributed to a file (kept if one is already set)."""
        if self.source is None and source is not None:
            self.source = source
        return self

    def __str__(self) -> str:
        parts = [p for p in (self.source, self.key, self.message) if p]
        # One line, always: messages quoting user text must not smuggle newlines in.
        return ": ".join(parts).replace("\r", " ").replace("\n", " ")
