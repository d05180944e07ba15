"""A run's episodes: per-round stats with sparklines on top, a filter line, and the sortable episode table."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, Static

from agentlightning_cli.inspect.filters import parse_filter
from agentlightning_cli.inspect.status_line import StatusLine
from agentlightning_cli.inspect.paged_table import PagedTable
from agentlightning_cli.inspect.shapes import episode_duration
from agentlightning_cli.inspect.source import RunSource
from agentlightning_cli.inspect.stats import run_stats, sparkline
from agentlightning_cli.inspect.text import cell
from agentlightning_cli.store import EpisodeSummary

# (header, sort key) — the order `s` cycles through. A key gives None for a missing value: those sort last
# whichever the direction.
COLUMNS: list[tuple[str, Any]] = [
    ("episode", lambda s: s.episode.id), ("round", lambda s: s.round_index),
    ("task", lambda s: s.episode.task_id), ("att", lambda s: s.episode.attempt),
    ("harness", lambda s: s.episode.harness), ("outcome", lambda s: s.episode.outcome),
    ("status", lambda s: s.episode.status), ("reward", lambda s: s.episode.reward),
    ("calls", lambda s: s.calls), ("tokens", lambda s: s.prompt_tokens + s.completion_tokens),
    ("dur s", episode_duration),
]
_STATUS_STYLE = {"failed": "red", "running": "yellow", "pending": "dim"}


def episode_row(s: EpisodeSummary) -> list[str]:
    e = s.episode
    return [e.id, cell(s.round_index), cell(e.task_id), str(e.attempt), cell(e.harness), cell(e.outcome), e.status,
            cell(e.reward), str(s.calls), str(s.prompt_tokens + s.completion_tokens), cell(episode_duration(s))]


def episode_style(s: EpisodeSummary) -> str | None:
    return _STATUS_STYLE.get(s.episode.status)


class EpisodesScreen(Screen[None]):
    BINDINGS = [
        Binding("slash", "focus_filter", "filter"), Binding("escape", "back", "back / clear filter"),
        Binding("s", "sort", "sort"), Binding("S", "reverse", "reverse"), Binding("ctrl+r", "reload", "re-read"),
    ]
    DEFAULT_CSS = "#summary { height: auto; padding: 0 1; } #filter { display: none; } #filter.shown { display: block; }"

    def __init__(self, source: RunSource, summaries: list[EpisodeSummary] | None = None):
        super().__init__()
        self.source = source
        self.preloaded = summaries  # read while the app started (maybe the first screen only): the first paint
        self._partial = summaries is not None  # until the whole list has been read
        self.summaries: list[EpisodeSummary] = []
        self.query_text = ""
        self.sort_column = 0
        self.descending = False
        self._version: int | None = None

    def compose(self):
        yield Static(id="summary")
        yield Input(placeholder="filter: status:failed outcome:timeout task:ID round:N reward>0.5 words  (enter applies)",
                    id="filter")
        yield PagedTable([h for h, _ in COLUMNS], episode_row, key=lambda s: s.episode.id, style=episode_style,
                         id="episodes")
        yield StatusLine("enter open · / filter · s/S sort · ? keys · q quit")

    @property
    def table(self) -> PagedTable:
        return self.query_one("#episodes", PagedTable)

    def on_mount(self) -> None:
        # The table first; the whole list (when the first paint had only its first screen) and the per-round
        # stats (a pass over every episode) right after the first paint.
        self.reload(stats=False)
        self.table.focus()
        self.call_after_refresh(self.reload if self._partial else self._show_summary)
        self.set_interval(self.app.REFRESH_S, self.poll)

    def poll(self) -> None:
        if self.source.store.data_version() != self._version:
            self.reload()

    def reload(self, stats: bool = True) -> None:
        """Read the episode list again (one query) and redraw, keeping the cursor on the same episode."""
        self._version = self.source.store.data_version()
        for cached in ("runs", "_names"):  # the run's status may have changed too
            self.source.__dict__.pop(cached, None)
        if self.preloaded is not None:
            self.summaries, self.preloaded = self.preloaded, None
        else:
            self.summaries, self._partial = self.source.store.episode_summaries(), False
        if stats:
            self._show_summary()
        current = self.table.current() if self.table.items else None
        self.refilter(keep=current.episode.id if current else None)

    def _show_summary(self) -> None:
        src = self.source
        run = src.run
        rounds = src.store.list_rounds(run.id) if run else []
        steps = src.store.list_train_steps(run.id) if run else []
        stats = run_stats(src.name, rounds, self.summaries, steps)
        indexed = [r for r in stats["rounds"] if r["round"] is not None]
        head = Text.assemble((f"{src.name}", "bold"), f"  {run.status if run else 'ad-hoc'}  ",
                             f"{len(self.summaries)} episodes  {len(rounds)} rounds  {src.run_dir}")
        lines = [head]
        if indexed:
            rewards = sparkline([r["reward_mean"] for r in indexed], 0.0, None)
            lines.append(Text(f"reward per round {rewards}  " + "  ".join(
                f"r{r['round']}: {cell(r['reward_mean'])}±{cell(r['reward_std'])} pass@1 {cell(r['pass_at_1'])}"
                for r in indexed[-6:])))
        losses = [st["loss"] for st in stats["train_steps"] if st["loss"] is not None]
        if losses:
            lines.append(Text(f"training loss     {sparkline(losses[-60:])}  {len(losses)} steps, last {cell(losses[-1])}"))
        self.query_one("#summary", Static).update(Text("\n").join(lines))

    def refilter(self, keep: str | None = None) -> None:
        try:
            predicate = parse_filter(self.query_text)
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        items = [s for s in self.summaries if predicate(s)]
        key = COLUMNS[self.sort_column][1]
        known = [s for s in items if key(s) is not None]
        known.sort(key=key, reverse=self.descending)
        items = known + [s for s in items if key(s) is None]
        self.table.show_items(items, keep_key=keep)
        header, _ = COLUMNS[self.sort_column]
        self.sub_title = (f"{len(items)} of {len(self.summaries)} episodes · sorted by {header}"
                          f"{' (descending)' if self.descending else ''}"
                          + (f" · filter: {self.query_text}" if self.query_text else "")
                          + (" · reading the rest…" if self._partial else ""))
        self.query_one(StatusLine).say(self.sub_title)

    def on_paged_table_row_selected(self, event: PagedTable.RowSelected) -> None:
        from agentlightning_cli.inspect.episode_view import EpisodeScreen

        chosen = self.table.current()
        if chosen is not None:
            self.app.push_screen(EpisodeScreen(self.source, chosen.episode.id))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_text = event.value.strip()
        self.refilter()
        self.table.focus()

    def action_focus_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    def action_back(self) -> None:
        box = self.query_one("#filter", Input)
        if self.query_text or box.has_focus:
            box.value, self.query_text = "", ""
            box.remove_class("shown")
            self.refilter()
            self.table.focus()
        elif len(self.app.screen_stack) > 2:
            self.app.pop_screen()

    def action_sort(self) -> None:
        self.sort_column = (self.sort_column + 1) % len(COLUMNS)
        self.refilter()

    def action_reverse(self) -> None:
        self.descending = not self.descending
        self.refilter()

    def action_reload(self) -> None:
        self.reload()
