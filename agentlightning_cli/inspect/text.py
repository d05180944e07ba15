"""Plain-text views for the terminal: aligned columns built with str methods (10,000 rows in a few ms; a rich
table of that size takes seconds), an episode with its calls and rows, a call's conversation, round stats."""

from __future__ import annotations

import json
import time
from typing import Any

from agentlightning_cli.inspect.shapes import episode_duration
from agentlightning_cli.store import EpisodeSummary

_EPISODE_COLUMNS = [("id", "id"), ("round", "round"), ("task", "task_id"), ("att", "attempt"), ("harness", "harness"),
                    ("status", "status"), ("outcome", "outcome"), ("reward", "reward"), ("calls", "calls"),
                    ("tokens", "tokens"), ("dur s", "duration_s")]
_CALL_COLUMNS = [("seq", "seq"), ("protocol", "protocol"), ("status", "status"), ("http", "http_status"),
                 ("stream", "stream"), ("model", "model"), ("prompt", "prompt_tokens"), ("compl", "completion_tokens"),
                 ("finish", "finish_reason"), ("ttfb s", "ttfb_s"), ("dur s", "duration_s")]


def cell(value: Any) -> str:
    kind = type(value)  # exact types first: this runs for every cell of a 10,000-row list
    if kind is str:
        return value
    if value is None:
        return "-"
    if kind is int:
        return str(value)
    if kind is bool:
        return "yes" if value else "no"
    if kind is float:
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(line.format(*r).rstrip() for r in [headers, *rows]) + "\n"


def episodes_table(episodes: list[dict[str, Any]]) -> str:
    rows = [[cell(e["prompt_tokens"] + e["completion_tokens"] if key == "tokens" else e[key])
             for _, key in _EPISODE_COLUMNS] for e in episodes]
    return table([h for h, _ in _EPISODE_COLUMNS], rows)


def columns_table(columns: list[tuple[str, list[str]]]) -> str:
    """Aligned columns given column by column: one width pass and one format per line (a 10,000-episode list in
    ~20 ms)."""
    widths = [max(len(h), max(map(len, col), default=0)) for h, col in columns]
    line = "  ".join(f"{{:<{w}}}" for w in widths).format
    rows = zip(*(col for _, col in columns))
    return "\n".join([line(*(h for h, _ in columns)).rstrip(), *(line(*r).rstrip() for r in rows)]) + "\n"


def summaries_table(summaries: list[EpisodeSummary]) -> str:
    """The same table as episodes_table, straight from the store's summaries: `inspect list` skips building a
    JSON dict per episode when it prints text."""
    eps = [s.episode for s in summaries]
    return columns_table([
        ("id", [e.id for e in eps]), ("round", [cell(s.round_index) for s in summaries]),
        ("task", [cell(e.task_id) for e in eps]), ("att", [str(e.attempt) for e in eps]),
        ("harness", [cell(e.harness) for e in eps]), ("status", [e.status for e in eps]),
        ("outcome", [cell(e.outcome) for e in eps]), ("reward", [cell(e.reward) for e in eps]),
        ("calls", [str(s.calls) for s in summaries]),
        ("tokens", [str(s.prompt_tokens + s.completion_tokens) for s in summaries]),
        ("dur s", [cell(episode_duration(s)) for s in summaries])])


def calls_table(calls: list[dict[str, Any]]) -> str:
    return table([h for h, _ in _CALL_COLUMNS], [[cell(c[key]) for _, key in _CALL_COLUMNS] for c in calls])


def when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def episode_text(ep: dict[str, Any]) -> str:
    lines = [f"episode {ep['id']}  run {ep['run']}  round {cell(ep['round'])}",
             f"task {cell(ep['task_id'])}  attempt {ep['attempt']}  harness {cell(ep['harness'])}",
             f"status {ep['status']}  outcome {cell(ep['outcome'])}  reward {cell(ep['reward'])}"
             f"  exit code {cell(ep['exit_code'])}",
             f"started {when(ep['started_at'])}  duration {cell(ep['duration_s'])} s  calls {len(ep['calls'])}"
             f" ({ep['failed_calls']} failed)  tokens {ep['prompt_tokens']} prompt + {ep['completion_tokens']} sampled"]
    if ep["error"]:
        lines.append(f"error: {ep['error']}")
    if ep["reward_detail"]:
        lines.append(f"reward detail: {json.dumps(ep['reward_detail'])}")
    patch = ep.get("patch")
    if patch is not None:
        lines.append(f"patch: {patch['error']}" if patch["text"] is None else
                     f"patch: {patch['files']} file(s), {patch['bytes']:,} bytes (`alight inspect show {ep['id']} --patch`)"
                     if patch["bytes"] else "patch: no change")
    helpers = [str(c["seq"]) for c in ep["calls"] if c.get("helper")]
    if helpers:
        lines.append(f"helper calls (another model name than the harness's {ep['harness_model']!r}; not trained"
                     f" unless train.helper_calls: train): seq {', '.join(helpers)}")
    out = "\n".join(lines) + "\n\n" + calls_table(ep["calls"])
    if ep.get("training"):
        from agentlightning_cli.inspect.training import training_lines

        out += "\n" + "".join(line + "\n" for _, line in training_lines(ep["training"]))
    rows = ep["rows"]
    out += f"\ntraining rows ({rows['merge']} token-prefix merge, as the trainer builds them): {len(rows['rows'])}" \
           f" for {ep['calls_with_ids']} calls with token ids\n"
    return out + "".join(line + "\n" for _, line in rows_lines(rows))


def _quoted(text: str | None) -> str:
    return "" if text is None else " " + json.dumps(text, ensure_ascii=False)


def rows_lines(rows: dict[str, Any]) -> list[tuple[str, str]]:
    """(style, line) for each line of a rows JSON (row_breaks.py): each row's calls, and before a row that broke
    the prefix: where, the ids on both sides (the reply token's text when stored) and the trainer's label."""
    out = [("yellow", f"  note: {rows['note']}")] if rows.get("note") else []
    if rows.get("conversations"):
        out.append(("", f"  conversations {conversations_line(rows['conversations'])}"))
    for row in rows["rows"]:
        brk = row["break"]
        if brk:
            # A new conversation (exact continuation's `start`) opens a row without breaking one.
            opened = brk.get("where") == "start"
            out.append(("" if opened else "yellow", f"  {'+' if opened else '✂'} {brk['reason']}"))
            if brk.get("at") is not None:
                got = "the prompt ends" if brk.get("got_id") is None else f"got id {brk['got_id']}"
                out.append(("yellow", f"      at token {brk['at']}: expected id {cell(brk.get('expected_id'))}"
                                      f"{_quoted(brk.get('expected_text'))}, {got}"))
            if brk.get("trainer_reason"):
                out.append(("yellow", f"      trainer's label: {brk['trainer_reason']}"))
        calls = ", ".join(str(s) for s in row["calls"])
        merge = "" if row.get("merge", "strict") == "strict" else f" ({row['merge']} merge)"
        if row.get("branches"):
            merge += f", {row['branches']} fork{'s' if row['branches'] > 1 else ''} packed in"
        out.append(("", f"  row {row['index']}: calls {calls} — {row['tokens']} tokens, {row['sampled']} sampled{merge}"))
        if row.get("dropped"):
            out.append(("red", f"    not trained: {row['dropped']}"))
    for skip in rows["skipped"]:
        out.append(("dim", f"  call {skip['call']} trains nothing: {skip['reason']}"))
    return out


def conversations_line(counts: dict[str, Any]) -> str:
    """Conversations, forks, fallbacks and breaks per 100 calls by kind (train/conversations.py)."""
    from agentlightning_cli.train.conversations import ConversationCounts

    return ConversationCounts.from_dict(counts).line()


def turn_text(turn: dict[str, Any], limit: int | None = 2000) -> str:
    head = turn["role"] + ("" if turn["kind"] == "text" else f" · {turn['kind'].replace('_', ' ')}")
    if turn.get("name"):
        head += f" {turn['name']}"
    if turn.get("call_id"):
        head += f" [{turn['call_id']}]"
    text = turn["text"]
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n… {len(text) - limit:,} more characters (--full shows all)"
    return f"── {head}\n{text}\n"


def call_text(call: dict[str, Any], full: bool = False) -> str:
    c = call
    lines = [f"call {c['id']}  episode {c['episode_id']}  seq {c['seq']}",
             f"{c['method']} {c['path']}  protocol {c['protocol']}  stream {cell(c['stream'])}  status {c['status']}"
             f" (HTTP {c['http_status']})",
             f"model {cell(c['client_model'])} -> adapter {cell(c['model'])}  finish {cell(c['finish_reason'])}",
             f"tokens {cell(c['prompt_tokens'])} prompt + {cell(c['completion_tokens'])} sampled  ttfb"
             f" {cell(c['ttfb_s'])} s  duration {cell(c['duration_s'])} s",
             f"tools offered: {', '.join(c['tools']) or '-'}"]
    if c.get("helper"):
        lines.append(f"helper call: asked for {c['client_model']!r}, not the harness's {c['harness_model']!r}"
                     " (not trained unless train.helper_calls: train)")
    if c["dropped"]:
        lines.append(f"dropped by translation: {json.dumps(c['dropped'])}")
    if c["sampling"]:
        lines.append(f"sampling: {json.dumps(c['sampling'])}")
    if c["error"]:
        lines.append(f"error: {c['error']}")
    if "continuation" in c:
        from agentlightning_cli.inspect.continuation import continuation_lines

        lines += continuation_lines(c["continuation"])
    limit = None if full else 2000
    body = "".join(turn_text(t, limit) for t in c["messages"])
    reply = "".join(turn_text(t, limit) for t in c["reply"]) or "(no reply)\n"
    return "\n".join(lines) + "\n\n" + body + "\n═══ reply\n" + reply


def stats_text(stats: dict[str, Any]) -> str:
    from agentlightning_cli.inspect.stats import sparkline

    rounds = stats["rounds"]
    headers = ["round", "episodes", "reward mean", "± std", "pass@1", "pass@k", "k", "outcomes", "tokens", "loss"]
    rows = []
    for r in rounds:
        outcomes = " ".join(f"{k}:{v}" for k, v in sorted(r["outcomes"].items()))
        loss = r["train"]["loss_last"] if r["train"] else None
        rows.append([cell(r["round"]), str(r["episodes"]), cell(r["reward_mean"]), cell(r["reward_std"]),
                     cell(r["pass_at_1"]), cell(r["pass_at_k"]), str(r["k"]), outcomes,
                     str(r["prompt_tokens"] + r["completion_tokens"]), cell(loss)])
    indexed = [r for r in rounds if r["round"] is not None]
    out = f"run {stats['run']}\n" + table(headers, rows)
    for r in rounds:
        if r.get("conversations"):
            out += f"round {r['round']} trained: conversations {conversations_line(r['conversations'])}\n"
    out += f"\nreward per round  {sparkline([r['reward_mean'] for r in indexed], 0.0, None)}"
    out += f"   pass@1 per round  {sparkline([r['pass_at_1'] for r in indexed], 0.0, 1.0)}\n"
    losses = [s["loss"] for s in stats["train_steps"]]
    if losses:
        out += f"loss per step     {sparkline(losses[-60:])}  ({len(losses)} steps; last {cell(losses[-1])})\n"
    evals = stats.get("evaluations") or []
    if evals:
        out += "\nheld-out evaluation (never trained on; 95% intervals clustered by task)\n"
        rows = [[str(e["trainings"]), e["policy"], str(e["episodes"]),
                 *[_interval(e[m]) for m in ("pass_at_1", "pass_at_k", "mean_reward")], cell(e.get("train_reward"))]
                for e in evals]
        out += table(["after trainings", "policy", "episodes", "pass@1", f"pass@{evals[0]['k']}", "mean reward",
                      "train reward"], rows)
        out += f"\nheld-out pass@1   {sparkline([(e['pass_at_1'] or {}).get('estimate') for e in evals], 0.0, 1.0)}\n"
    return out


def _interval(ci: dict[str, float] | None) -> str:
    return "-" if ci is None else f"{ci['estimate']:.2f} [{ci['low']:.2f}, {ci['high']:.2f}]"
