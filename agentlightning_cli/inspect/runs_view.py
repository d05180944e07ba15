"""The list of runs under runs_dir (newest first); enter opens one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static

from agentlightning_cli.inspect.status_line import StatusLine
from agentlightning_cli.inspect.paged_table import PagedTable
from agentlightning_cli.inspect.source import run_summaries
from agentlightning_cli.inspect.text import when

COLUMNS = ["run", "status", "rounds", "episodes", "created", "dir"]


def run_row(r: dict[str, Any]) -> list[str]:
    return [r["name"], r["status"], str(r["rounds"]), str(r["episodes"]), when(r["created_at"]), r["dir"]]


class RunsScreen(Screen[None]):
    BINDINGS = [Binding("ctrl+r", "reload", "re-read")]

    def __init__(self, runs_dir: Path):
        super().__init__()
        self.runs_dir = runs_dir

    def compose(self):
        yield Static(f"runs under {self.runs_dir}/", id="where")
        yield PagedTable(COLUMNS, run_row, key=lambda r: r["dir"], id="runs")
        yield StatusLine("enter open · ? keys · q quit")

    def on_mount(self) -> None:
        self.action_reload()
        self.query_one("#runs", PagedTable).focus()

    def action_reload(self) -> None:
        runs = run_summaries(self.runs_dir)
        self.query_one("#runs", PagedTable).show_items(runs)
        self.sub_title = f"{len(runs)} runs · enter opens one"
        self.query_one(StatusLine).say(self.sub_title)

    def on_paged_table_row_selected(self, event: PagedTable.RowSelected) -> None:
        chosen = self.query_one("#runs", PagedTable).current()
        if chosen is not None:
            self.app.open_run(Path(chosen["dir"]))
