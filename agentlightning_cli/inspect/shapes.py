"""The one JSON shape of each object `alight inspect` prints (`--json`), also used by the exports.

Every object carries `"object": "<kind>"`. Times are time.time() seconds; durations are seconds. `show` adds
nested lists to the same shapes (an episode's `calls` and `rows`, a call's `messages` and `reply`); `--raw`
adds the exact bodies, token ids and logprobs. The README documents these shapes.
"""

from __future__ import annotations

import base64
from typing import Any

from agentlightning_cli.store import Call, CallSummary, EpisodeSummary, Round, Run


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 3)


def run_json(run: Run | None, name: str, run_dir: str, rounds: int, episodes: int) -> dict[str, Any]:
    """A run directory's run; ad-hoc proxy stores (no run row) show `id: null`, `status: "ad-hoc"`."""
    return {"object": "run", "id": run.id if run else None, "name": name, "dir": run_dir,
            "status": run.status if run else "ad-hoc", "created_at": run.created_at if run else None,
            "rounds": rounds, "episodes": episodes, "config": run.config if run else {}}


def round_json(rnd: Round) -> dict[str, Any]:
    return {"object": "round", "id": rnd.id, "run_id": rnd.run_id, "index": rnd.index, "policy": rnd.policy,
            "adapter_path": rnd.adapter_path, "status": rnd.status, "started_at": rnd.started_at,
            "ended_at": rnd.ended_at, "duration_s": _span(rnd.started_at, rnd.ended_at)}


def episode_json(s: EpisodeSummary, run_name: str) -> dict[str, Any]:
    e = s.episode
    return {"object": "episode", "id": e.id, "run": run_name, "run_id": e.run_id, "round": s.round_index,
            "round_id": e.round_id, "task_id": e.task_id, "attempt": e.attempt, "harness": e.harness,
            "status": e.status, "outcome": e.outcome, "reward": e.reward, "reward_detail": e.reward_detail,
            "exit_code": e.exit_code, "error": e.error, "workspace": e.workspace, "created_at": e.created_at,
            "started_at": e.started_at, "ended_at": e.ended_at, "duration_s": episode_duration(s),
            "calls": s.calls, "failed_calls": s.failed_calls, "prompt_tokens": s.prompt_tokens,
            "completion_tokens": s.completion_tokens}


def episode_duration(s: EpisodeSummary) -> float | None:
    """The episode's wall time: started..ended when recorded, else its first call's start..last call's end."""
    e = s.episode
    return _span(e.started_at, e.ended_at) if e.started_at and e.ended_at else _span(s.first_call_at, s.last_call_at)


def call_json(c: CallSummary) -> dict[str, Any]:
    return {"object": "call", "id": c.id, "episode_id": c.episode_id, "seq": c.seq, "protocol": c.protocol,
            "method": c.method, "path": c.path, "status": c.status, "http_status": c.http_status, "stream": c.stream,
            "client_model": c.client_model, "model": c.model, "finish_reason": c.finish_reason, "usage": c.usage,
            "sampling": c.sampling, "dropped": c.dropped, "error": c.error, "started_at": c.started_at,
            "first_byte_at": c.first_byte_at, "ended_at": c.ended_at, "duration_s": _span(c.started_at, c.ended_at),
            "ttfb_s": _span(c.started_at, c.first_byte_at), "prompt_tokens": c.prompt_len,
            "completion_tokens": c.completion_len, "prompt_base_seq": c.prompt_base_seq,
            "prompt_prefix_len": c.prompt_prefix_len, "request_bytes": c.request_size,
            "response_bytes": c.response_size}


def body_json(data: bytes | None) -> str | dict[str, str] | None:
    """A body as JSON text when it is UTF-8 (nearly always), else `{"base64": ...}`: exact either way."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def call_detail_json(summary: CallSummary, call: Call, raw: bool = False) -> dict[str, Any]:
    """`show CALL --json`: the call shape plus the conversation as turns; `raw` adds exact bytes and ids."""
    # Imported here: `inspect list` needs only the shapes above, and starts ~30 ms sooner without these.
    from agentlightning_cli.inspect.continuation import continuation_json
    from agentlightning_cli.inspect.conversation import reply_turns, request_turns, tool_names
    from agentlightning_cli.inspect.tokens import completion_token_texts

    out = call_json(summary)
    out["tools"] = tool_names(call.protocol, call.client_request)
    out["messages"] = [t.to_json() for t in request_turns(call.protocol, call.client_request)]
    out["reply"] = [t.to_json() for t in reply_turns(call.protocol, call.response, call.stream)]
    out["continuation"] = continuation_json(call, raw)  # exact continuation's decision; null when rendered
    if raw:
        out["raw"] = {
            "client_headers": call.client_headers, "client_request": body_json(call.client_request),
            "response": body_json(call.response), "upstream_request": body_json(call.upstream_request),
            "upstream_response": body_json(call.upstream_response), "prompt_token_ids": call.prompt_token_ids,
            "completion_token_ids": call.completion_token_ids, "completion_logprobs": call.completion_logprobs,
            "completion_token_texts": completion_token_texts(call)}  # vLLM's token strings where stored, else null
    return out
