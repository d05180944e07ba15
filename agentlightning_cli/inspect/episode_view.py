"""One episode: what it was (task, outcome, reward, error), its calls in order with a preview of each reply, and
on `t` what the trainer does with it (its advantage, or why it trains nothing: training.py) and the training rows its
calls make by token-prefix merge (where and why a new row starts)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from agentlightning_cli.inspect.conversation import reply_turns
from agentlightning_cli.inspect.status_line import StatusLine
from agentlightning_cli.inspect.paged_table import PagedTable
from agentlightning_cli.inspect.row_breaks import stored_episode_rows
from agentlightning_cli.inspect.rows import merge_rows
from agentlightning_cli.inspect.shapes import episode_duration
from agentlightning_cli.inspect.source import RunSource
from agentlightning_cli.inspect.text import cell, conversations_line, rows_lines
from agentlightning_cli.inspect.training import episode_training, training_lines
from agentlightning_cli.store import CallSummary

PREFETCH_AFTER_S = 0.5  # the rows are read this long after the episode opens: not while its calls are drawn
COLUMNS = ["seq", "protocol", "status", "stream", "adapter", "prompt", "sampled", "finish", "ttfb s", "dur s", "row",
           "reply"]


def preview(turns: list[Any]) -> str:
    """One line for the call list: the tool calls it made, else the start of its text."""
    calls = [f"{t.name}({t.text[:60]})" for t in turns if t.kind == "tool_call"]
    if calls:
        return "→ " + "; ".join(calls)
    text = " ".join(t.text for t in turns if t.kind in ("text", "raw")).replace("\n", " ")
    return text[:100]


class EpisodeScreen(Screen[None]):
    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("t", "rows", "training rows"),
                Binding("ctrl+r", "reload", "re-read")]
    DEFAULT_CSS = "#episode { height: auto; padding: 0 1; } #rows { height: auto; max-height: 50%; padding: 0 1; display: none; } #rows.shown { display: block; }"
    # The rows scroll in their own box (tab focuses it): an episode of 100 calls may have as many breaks.

    def __init__(self, source: RunSource, episode_id: str):
        super().__init__()
        self.source = source
        self.episode_id = episode_id
        self.loaded = False
        self.calls: list[CallSummary] = []
        self._version: int | None = None
        self._detailed = False  # the trainer's rows (row_breaks.py) replaced the quick ones
        self._prefetched: Future | None = None  # those rows, read in a thread after the first paint

    def compose(self):
        yield Static(id="episode")
        yield PagedTable(COLUMNS, self._row, key=lambda c: c.id, style=lambda c: None if c.status == "ok" else "red",
                         id="calls")
        with VerticalScroll(id="rows"):
            yield Static(id="rows-text")
        yield StatusLine("enter open a call · t training rows · esc back · ? keys · q quit")

    @property
    def table(self) -> PagedTable:
        return self.query_one("#calls", PagedTable)

    def on_mount(self) -> None:
        self.reload()
        self.table.focus()
        self.set_interval(self.app.REFRESH_S, self.poll)

    def poll(self) -> None:
        if self.source.store.data_version() != self._version:
            self.reload()

    def reload(self) -> None:
        store = self.source.store
        self._version = store.data_version()
        found = store.episode_summaries_by_id([self.episode_id])
        if not found:
            self.query_one("#episode", Static).update(f"episode {self.episode_id} is not in this run")
            return
        summary = found[0]
        self.calls = store.call_summaries(self.episode_id)
        # Reply previews need only the response bodies: plain frames, one small decode each.
        responses = store.call_responses(self.episode_id)
        self._previews = {c.seq: preview(reply_turns(c.protocol, responses.get(c.seq), c.stream)) for c in self.calls}
        self._rows = merge_rows(self.calls)  # quick, from summaries; `t` replaces it with the trainer's rows
        self._row_of = {seq: row.index for row in self._rows.rows for seq in row.calls}
        self._summary = summary
        if self._detailed:
            self._load_detailed_rows()
        e = summary.episode
        lines = [Text.assemble((e.id, "bold"), f"  round {cell(summary.round_index)}  task {cell(e.task_id)}"
                               f"  attempt {e.attempt}  harness {cell(e.harness)}"),
                 Text(f"status {e.status}  outcome {cell(e.outcome)}  reward {cell(e.reward)}  exit code"
                      f" {cell(e.exit_code)}  duration {cell(episode_duration(summary))} s  calls {summary.calls}"
                      f" ({summary.failed_calls} failed)  tokens {summary.prompt_tokens} prompt +"
                      f" {summary.completion_tokens} sampled  rows {len(self._rows.rows)}")]
        if e.error:
            lines.append(Text(f"error: {e.error}", style="red"))
        if e.reward_detail:
            lines.append(Text(f"reward detail: {json.dumps(e.reward_detail)[:300]}"))
        patch = store.get_patch(self.episode_id)
        if patch is not None:
            lines.append(Text(f"patch: {patch.error}" if patch.patch is None else "patch: no change" if not patch.size
                              else f"patch: {patch.files} file(s), {patch.size:,} bytes (alight inspect show"
                                   f" {self.episode_id} --patch)"))
        self.query_one("#episode", Static).update(Text("\n").join(lines))
        current = self.table.current() if self.table.items else None
        self.table.show_items(self.calls, keep_key=current.id if current else None)
        self.query_one("#rows-text", Static).update(self._rows_text())
        self.sub_title = f"{len(self.calls)} calls · enter opens one · t training rows"
        self.query_one(StatusLine).say(self.sub_title)
        if not self.loaded:  # once, when the call list has long been drawn: read the rows `t` will show
            self.set_timer(PREFETCH_AFTER_S, self._prefetch_rows)
        self.loaded = True

    def _row(self, c: CallSummary) -> list[Any]:
        ttfb = None if c.first_byte_at is None else c.first_byte_at - c.started_at
        return [str(c.seq), c.protocol, c.status, "yes" if c.stream else "", cell(c.model), cell(c.prompt_len),
                cell(c.completion_len), cell(c.finish_reason), cell(ttfb), cell(c.ended_at - c.started_at),
                cell(self._row_of.get(c.seq)), self._previews.get(c.seq, "")]

    def _prefetch_rows(self) -> None:
        """Read the trainer's rows (every call's token ids: ~0.1 s for 100 calls) in a thread while the user looks
        at the call list, so `t` shows them at once. The store gives each thread its own connection."""
        s, future = self._summary, Future()

        calls = self.calls

        def work() -> None:
            try:
                rows = stored_episode_rows(self.source.store, self.episode_id, s.episode.run_id, s.round_index)
                # and what the trainer does with the episode: one query for its whole round, off the UI thread too
                future.set_result((rows, episode_training(self.source.store, s, rows, calls)))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever asks for the rows
                future.set_exception(exc)

        self._prefetched = future
        threading.Thread(target=work, name="alight-inspect-rows", daemon=True).start()

    def _load_detailed_rows(self) -> None:
        """The trainer's rows from the episode's token ids: the prefetched ones when the run has not changed since."""
        s, future = self._summary, self._prefetched
        self._prefetched = None
        try:
            fresh = future is not None and self.source.store.data_version() == self._version
            ready = future.result() if fresh else None
        except Exception:  # noqa: BLE001 - read again below, where an error shows as itself
            ready = None
        if ready is None:
            rows = stored_episode_rows(self.source.store, self.episode_id, s.episode.run_id, s.round_index)
            # What the trainer does with the episode (one query for its round's episodes): shown above the rows.
            ready = (rows, episode_training(self.source.store, s, rows, self.calls))
        self._rows, self._training = ready
        self._row_of = {seq: row.index for row in self._rows.rows for seq in row.calls}

    def _rows_text(self) -> Text:
        if not self._detailed:
            return Text("")
        rows, round_index, run_id = self._rows, self._summary.round_index, self._summary.episode.run_id
        out = [Text(line, style=style) for style, line in training_lines(self._training)]
        out += [Text(f"training rows ({rows.merge} token-prefix merge, as the trainer builds them): {len(rows.rows)}"
                    f" rows for {sum(len(r.calls) for r in rows.rows)} calls", style="bold")]
        out += [Text(line, style=style) for style, line in rows_lines(rows.to_json())]
        trained = (self.source.store.get_train_round(run_id, round_index)
                   if run_id is not None and round_index is not None else None)
        if trained is not None:
            out.append(Text(f"round {round_index} training: {trained.rows} rows from {trained.calls} calls"
                            f" ({trained.merge_rule} merge), breaks {json.dumps(trained.break_reasons)},"
                            f" dropped {json.dumps(trained.dropped)}"))
            if (trained.detail or {}).get("conversations"):
                out.append(Text(f"round {round_index} conversations"
                                f" {conversations_line(trained.detail['conversations'])}"))
        return Text("\n").join(out)

    def on_paged_table_row_selected(self, event: PagedTable.RowSelected) -> None:
        from agentlightning_cli.inspect.call_view import CallScreen

        chosen = self.table.current()
        if chosen is not None:
            self.app.push_screen(CallScreen(self.source, chosen.id))

    def action_rows(self) -> None:
        box = self.query_one("#rows", VerticalScroll)
        if not self._detailed:
            self._detailed = True
            self._load_detailed_rows()
            self.query_one("#rows-text", Static).update(self._rows_text())
            current = self.table.current()
            self.table.show_items(self.calls, keep_key=current.id if current else None)  # the row column too
        box.toggle_class("shown")

    def action_reload(self) -> None:
        self.reload()
