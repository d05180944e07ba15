"""The one-line status bar at the bottom of every screen of the browser."""

from __future__ import annotations

from textual.widgets import Static


class StatusLine(Static):
    """The bottom line: where you are and the keys that matter here. A plain Static: Textual's Footer builds a
    widget per key binding and made opening a screen ~0.2 s slower."""

    DEFAULT_CSS = "StatusLine { dock: bottom; height: 1; background: $panel; color: $text-muted; padding: 0 1; }"

    def __init__(self, keys: str):
        super().__init__(keys)
        self.keys = keys

    def say(self, text: str) -> None:
        self.update(f"{text}   {self.keys}")
