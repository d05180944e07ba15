"""One call: the conversation the client sent (system/user/assistant/tool turns, tool calls and results), the
reply, finish reason, tokens, timings, the adapter that served it and what translation dropped. Per-token
logprobs (`l`; `d` decodes their ids with the run's own tokenizer when vLLM's token text was not stored) and the
raw bodies (`w`) on demand.

Long messages render lazily: each turn shows its first 2,000 characters until `e` expands them, so a 100 kB+
prompt does not stall the screen; the logprob table is built only when asked for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from agentlightning_cli.inspect.status_line import StatusLine
from agentlightning_cli.inspect.shapes import call_detail_json
from agentlightning_cli.inspect.source import RunSource
from agentlightning_cli.inspect.text import cell

PREVIEW_CHARS = 2000
_ROLE_STYLE = {"system": "magenta", "user": "cyan", "assistant": "green", "tool": "yellow", "error": "red"}


def turn_widget(turn: dict[str, Any], expanded: bool) -> Static:
    head = turn["role"] + ("" if turn["kind"] == "text" else f" · {turn['kind'].replace('_', ' ')}")
    if turn.get("name"):
        head += f" {turn['name']}"
    if turn.get("call_id"):
        head += f"  [{turn['call_id']}]"
    body = turn["text"]
    more = ""
    if not expanded and len(body) > PREVIEW_CHARS:
        more = f"\n… {len(body) - PREVIEW_CHARS:,} more characters (e expands)"
        body = body[:PREVIEW_CHARS]
    text = Text.assemble((f"── {head}\n", f"bold {_ROLE_STYLE.get(turn['role'], '')}"), body, (more, "dim"))
    return Static(text, classes=f"turn {turn['kind']}")


class Scrolling(VerticalScroll):
    """A scrolling column that the keyboard can move (focusable)."""

    can_focus = True


class CallScreen(Screen[None]):
    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("l", "logprobs", "logprobs"),
                Binding("w", "raw", "raw bodies"), Binding("e", "expand", "expand"),
                Binding("d", "decode", "decode ids")]
    DEFAULT_CSS = "#head { height: auto; padding: 0 1; border-bottom: solid $primary; } .turn { padding: 0 1 1 1; } .extra { padding: 0 1; }"

    def __init__(self, source: RunSource, call_id: str):
        super().__init__()
        self.source = source
        self.call_id = call_id
        self.expanded = False
        self.showing: str | None = None  # None | "logprobs" | "raw"
        self.detail: dict[str, Any] = {}
        self.decoded: list[str] | None = None  # token texts from the run's tokenizer, after `d`
        self.decoded_from: Path | None = None

    def compose(self):
        yield Static(id="head")
        yield Scrolling(id="body")
        yield StatusLine("l logprobs · d decode ids · w raw · e expand · esc back · ? keys · q quit")

    def on_mount(self) -> None:
        store = self.source.store
        summary = store.call_summaries_by_id([self.call_id])[0]
        self.detail = call_detail_json(summary, store.get_call(self.call_id), raw=True)
        c = self.detail
        ttfb, dur = cell(c["ttfb_s"]), cell(c["duration_s"])
        lines = [Text.assemble((f"call {c['seq']}", "bold"), f"  {c['id']}  {c['method']} {c['path']}  {c['protocol']}"
                               f"{'  streamed' if c['stream'] else ''}"),
                 Text(f"status {c['status']} (HTTP {c['http_status']})  finish {cell(c['finish_reason'])}  tokens"
                      f" {cell(c['prompt_tokens'])} prompt + {cell(c['completion_tokens'])} sampled  ttfb {ttfb} s"
                      f"  duration {dur} s"),
                 Text(f"model asked {cell(c['client_model'])} → served by adapter {cell(c['model'])}  sampling"
                      f" {json.dumps(c['sampling']) if c['sampling'] else '-'}  tools {', '.join(c['tools']) or '-'}")]
        if c["dropped"]:
            lines.append(Text(f"dropped by translation (recorded, not sent): {json.dumps(c['dropped'])}", style="yellow"))
        if c["error"]:
            lines.append(Text(f"error: {c['error']}", style="red"))
        from agentlightning_cli.inspect.continuation import continuation_lines

        lines += [Text(line, style="cyan") for line in continuation_lines(c["continuation"])]
        self.query_one("#head", Static).update(Text("\n").join(lines))
        self.sub_title = f"{len(c['messages'])} turns sent · l logprobs · w raw · e expand"
        self.query_one(StatusLine).say(self.sub_title)
        self.render_body()
        self.query_one("#body", Scrolling).focus()

    def render_body(self) -> None:
        body = self.query_one("#body", Scrolling)
        body.remove_children()
        c = self.detail
        widgets = [turn_widget(t, self.expanded) for t in c["messages"]]
        widgets.append(Static(Text("═══ reply", style="bold"), classes="turn"))
        widgets += [turn_widget(t, self.expanded) for t in c["reply"]] or [Static("(no reply)", classes="turn")]
        if self.showing == "logprobs":
            widgets.append(Static(self._logprobs(), classes="extra"))
        elif self.showing == "raw":
            widgets.append(Static(self._raw(), classes="extra"))
        body.mount_all(widgets)

    def _logprobs(self) -> Text:
        raw = self.detail["raw"]
        ids, logprobs = raw["completion_token_ids"] or [], raw["completion_logprobs"] or []
        if not ids:
            return Text("no completion token ids recorded for this call", style="dim")
        texts = raw.get("completion_token_texts")
        where = ("token text as vLLM reported it" if texts is not None else
                 f"token text decoded by the run's tokenizer ({self.decoded_from}), not vLLM's own strings"
                 if self.decoded is not None else
                 "no token text stored for this call (a streamed answer keeps ids only; d decodes with the"
                 " run's tokenizer)")
        texts = texts if texts is not None else self.decoded
        lines = [Text(f"per-token logprobs: {len(ids)} sampled tokens (index  token id  logprob  text) — {where}",
                      style="bold")]
        texts = texts or [None] * len(ids)
        for i, (tok, lp, txt) in enumerate(zip(ids, logprobs + [None] * (len(ids) - len(logprobs)), texts)):
            shown = "" if txt is None else json.dumps(txt, ensure_ascii=False)
            lines.append(Text(f"{i:>5}  {tok:>8}  {'-' if lp is None else f'{lp:9.5f}'}  {shown}"))
        return Text("\n").join(lines)

    def _raw(self) -> Text:
        raw = self.detail["raw"]
        parts = []
        for name in ("client_headers", "client_request", "response", "upstream_request", "upstream_response"):
            value = raw[name]
            shown = value if isinstance(value, str) else json.dumps(value)
            if not self.expanded and shown and len(shown) > 20 * PREVIEW_CHARS:
                shown = shown[:20 * PREVIEW_CHARS] + f"\n… {len(shown) - 20 * PREVIEW_CHARS:,} more characters"
            parts.append(Text.assemble((f"── {name}\n", "bold"), shown or "-"))
        return Text("\n").join(parts)

    def _toggle(self, what: str) -> None:
        self.showing = None if self.showing == what else what
        self.render_body()
        if self.showing:
            self.query_one("#body", Scrolling).scroll_end(animate=False)

    def action_logprobs(self) -> None:
        self._toggle("logprobs")

    def action_raw(self) -> None:
        self._toggle("raw")

    def action_decode(self) -> None:
        """Decode the sampled ids with the run's own tokenizer (loaded now, once per app) when no text was stored."""
        from agentlightning_cli.inspect.tokens import LazyDecoder, run_tokenizer_file

        raw = self.detail.get("raw") or {}
        if raw.get("completion_token_texts") is not None or not raw.get("completion_token_ids"):
            self.notify("this call's token text is already shown" if raw.get("completion_token_ids")
                        else "no sampled token ids recorded for this call")
            return
        run = self.source.run
        path = run_tokenizer_file(run.config if run else None)
        if path is None:
            self.notify("the run's model tokenizer is not on this machine (serve.model of the run's settings)",
                        severity="warning")
            return
        try:
            self.decoded, self.decoded_from = LazyDecoder.for_file(path).texts(raw["completion_token_ids"]), path
        except (RuntimeError, OSError, ValueError, TypeError) as exc:
            self.notify(f"cannot decode with {path}: {exc}", severity="error")
            return
        self.showing = "logprobs"
        self.render_body()
        self.query_one("#body", Scrolling).scroll_end(animate=False)

    def action_expand(self) -> None:
        self.expanded = not self.expanded
        self.render_body()
