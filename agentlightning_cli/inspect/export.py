"""Exports, one call at a time (a 200,000-call run never sits in memory): JSONL for other trainers; HAR in har.py.

A JSONL line is the call's JSON shape (shapes.call_json) plus its episode's context, the conversation as turns,
and the exact token ids and logprobs vLLM returned — what another trainer needs without re-tokenising anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from agentlightning_cli.inspect.continuation import continuation_json
from agentlightning_cli.inspect.conversation import reply_turns, request_turns
from agentlightning_cli.inspect.shapes import call_json
from agentlightning_cli.inspect.source import RunSource
from agentlightning_cli.store import Call, CallSummary, EpisodeSummary


def iter_calls(source: RunSource, episodes: list[EpisodeSummary]) -> Iterator[tuple[EpisodeSummary, CallSummary, Call]]:
    """Every call of the given episodes, episode by episode, in seq order: (episode, its summary, the full call)."""
    store = source.store
    for ep in episodes:
        if not ep.calls:
            continue
        summaries = {s.seq: s for s in store.call_summaries(ep.episode.id)}
        for call in store.get_calls(ep.episode.id):
            yield ep, summaries[call.seq], call


def dumps(value: Any) -> bytes:
    """orjson where it can (several times faster); json for what it refuses (lone surrogates, huge ints)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=True).encode()


def episode_context(ep: EpisodeSummary, run_name: str) -> dict[str, Any]:
    e = ep.episode
    return {"id": e.id, "run": run_name, "round": ep.round_index, "task_id": e.task_id, "attempt": e.attempt,
            "harness": e.harness, "status": e.status, "outcome": e.outcome, "reward": e.reward}


def jsonl_line(source: RunSource, ep: EpisodeSummary, summary: CallSummary, call: Call) -> dict[str, Any]:
    out = call_json(summary)
    out["episode"] = episode_context(ep, source.run_name(ep.episode.run_id))
    out["messages"] = [t.to_json() for t in request_turns(call.protocol, call.client_request)]
    out["reply"] = [t.to_json() for t in reply_turns(call.protocol, call.response, call.stream)]
    out["prompt_token_ids"] = call.prompt_token_ids
    out["completion_token_ids"] = call.completion_token_ids
    out["completion_logprobs"] = call.completion_logprobs
    out["continuation"] = continuation_json(call)  # which conversation, fork or fallback (null when rendered)
    return out


def write_jsonl(source: RunSource, episodes: list[EpisodeSummary], out: IO[bytes]) -> int:
    count = 0
    for ep, summary, call in iter_calls(source, episodes):
        out.write(dumps(jsonl_line(source, ep, summary, call)) + b"\n")
        count += 1
    return count


def open_output(path: Path | None) -> IO[bytes]:
    """The file to write (parents created), or stdout's bytes when no path is given."""
    import sys

    if path is None:
        return sys.stdout.buffer
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("wb")


def dumps_pretty(value: Any) -> str:
    """Indented JSON for --json output: orjson (a 10,000-episode list in ~30 ms instead of ~300 ms), json for
    what orjson refuses. Same text either way for what both accept: 2-space indent, keys in insertion order."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n"
    except TypeError:
        return json.dumps(value, indent=2, ensure_ascii=False) + "\n"
