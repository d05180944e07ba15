"""The one exception type the CLI boundary turns into a clear message."""

from __future__ import annotations


class AlightError(Exception):
    """A problem the user can fix: printed as one line plus a hint, exit code 1."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class UsageError(AlightError):
    """Bad command-line usage: exit code 2, like Click's own usage errors."""

    exit_code = 2
