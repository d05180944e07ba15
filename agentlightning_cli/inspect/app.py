"""The interactive browser: runs → a run's episodes (with per-round stats) → an episode's calls → one call.

Keyboard first and terminal-only, so it works over SSH. `q` quits, `?` lists the keys, `escape` goes back.
The open run is re-read when another process commits to it (a run still being written shows up as it grows).
Textual is imported by this module only, which nothing imports until the app starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static

from agentlightning_cli.inspect.source import RunSource

KEYS = """\
Everywhere     q quit · ? these keys · escape back
Runs           enter open the run
Episodes       enter open the episode · / filter (status:failed outcome:timeout task:ID round:N
               harness:NAME reward>0.5 reward:none, other words search id/task/error) · escape clear the filter
               s sort by the next column · S reverse the order · ctrl+r re-read now
Episode        enter open the call · t training rows (token-prefix merge; where and why a prefix broke) on/off
               · tab moves between the calls and the rows
Call           l per-token logprobs on/off · d decode their ids with the run's tokenizer (when no text was
               stored) · w raw bodies on/off · e expand long messages
Tables         ↑ ↓ page-up page-down home end; more rows load as the cursor nears the end
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "close")]
    DEFAULT_CSS = "HelpScreen { align: center middle; } #keys { width: 110; height: auto; border: round $accent; padding: 1 2; background: $panel; }"

    def compose(self):
        yield Static(KEYS, id="keys")


WARM_AFTER_S = 1.0


def _warm_imports() -> None:
    """Once the first screen is up: the settings models (~0.3 s of imports) that `t` needs for a run whose
    snapshot lacks a training setting, imported in a thread instead of when the user presses the key."""
    import importlib
    import threading

    def work() -> None:
        importlib.import_module("agentlightning_cli.config")

    threading.Thread(target=work, name="alight-inspect-warm", daemon=True).start()


class InspectApp(App[None]):
    TITLE = "alight inspect"
    BINDINGS = [Binding("q", "quit", "quit"), Binding("question_mark", "help", "keys")]
    REFRESH_S = 2.0  # how often the open run is checked for new commits (PRAGMA data_version: one cheap read)

    def __init__(self, run_dir: Path | None, runs_dir: Path = Path("runs"), preload: Any = None):
        super().__init__()
        self.run_dir = run_dir
        self.runs_dir = runs_dir
        self.source: RunSource | None = None
        self.preload = preload  # a Future of the run's episode summaries, read while the app started

    def on_mount(self) -> None:
        from agentlightning_cli.inspect.episodes_view import EpisodesScreen
        from agentlightning_cli.inspect.runs_view import RunsScreen

        if self.run_dir is None:
            self.push_screen(RunsScreen(self.runs_dir))
        else:
            self.source = RunSource.open(self.run_dir)
            self.push_screen(EpisodesScreen(self.source, self.preload.result() if self.preload else None))
        self.set_timer(WARM_AFTER_S, _warm_imports)

    def open_run(self, run_dir: Path) -> None:
        from agentlightning_cli.inspect.episodes_view import EpisodesScreen

        if self.source is not None:
            self.source.close()
        self.source = RunSource.open(run_dir)
        self.push_screen(EpisodesScreen(self.source))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def on_unmount(self) -> None:
        if self.source is not None:
            self.source.close()
