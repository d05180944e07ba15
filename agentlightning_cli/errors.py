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


def upstream_error_message(raw: bytes | str, limit: int = 500) -> str:
    """The human message inside an OpenAI-style error body (`{"error": {"message": ...}}`, as vLLM answers), or
    the text itself; at most `limit` characters. Shared by the proxy and the vLLM client (serve/)."""
    import json

    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:limit]
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])[:limit]
    if isinstance(err, str):
        return err[:limit]
    return text.strip()[:limit]
