"""Episodes as Harbor's ATIF trajectories (Agent Trajectory Interchange Format, ATIF-v1.6 as the `harbor` 0.25.0
wheel's harbor/models/trajectories defines it), so Harbor's viewer and tools read alight episodes.

A trajectory is one conversation told once, while alight stores every call with the whole history it sent. So
the calls are walked in order and only what is new is written: a call whose request starts with everything
already told (the previous request and reply) adds its new turns; a call whose request rewrote the history (a
harness that compacts, a retry) restarts the story, its repeated turns marked `is_copied_context` (ATIF's flag for
context copied after summarization, which trainers must not train on). A reply is one agent step (text,
reasoning, tool calls, token ids and logprobs in its metrics); the tool results that answer it become that step's
observation, as ATIF ties them by tool_call_id.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentlightning_cli.inspect.conversation import Turn, reply_turns, request_turns
from agentlightning_cli.inspect.export import episode_context
from agentlightning_cli.store import Call, EpisodeSummary

SCHEMA_VERSION = "ATIF-v1.6"


def trajectory(run_name: str, ep: EpisodeSummary, calls: list[Call]) -> dict[str, Any] | None:
    """The episode as an ATIF trajectory (a JSON object), or None when it made no model call (ATIF needs a step)."""
    if not calls:
        return None
    steps: list[dict[str, Any]] = []
    told: list[tuple] = []  # the previous request's turns: a request that starts with them continues the story
    last_agent: dict[str, Any] | None = None
    totals = {"prompt": 0, "completion": 0}
    for call in calls:
        turns = request_turns(call.protocol, call.client_request)
        keys = [_key(t) for t in turns]
        copied = not (told and keys[: len(told)] == told)
        new = turns if copied else turns[len(told):]
        if copied:
            last_agent = None
        elif last_agent is not None:
            # The request re-sends the previous reply as the client encodes it: already told as the agent step.
            while new and new[0].role == "assistant" and new[0].kind != "tool_result":
                new = new[1:]
        for turn in new:
            last_agent = _add_request_turn(steps, turn, last_agent, copied=copied and bool(told))
        reply = reply_turns(call.protocol, call.response, call.stream)
        last_agent = _add_reply(steps, call, reply)
        usage = call.usage or {}
        totals["prompt"] += int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0)
        totals["completion"] += int(usage.get("completion_tokens") or usage.get("output_tokens") or 0)
        told = keys
    for i, step in enumerate(steps, start=1):
        step["step_id"] = i
    e = ep.episode
    model = next((c.model or c.client_model for c in calls if c.model or c.client_model), None)
    return _without_none({
        "schema_version": SCHEMA_VERSION,
        "session_id": e.id,
        "trajectory_id": e.id,
        "agent": {"name": e.harness or "unknown", "version": "unknown", "model_name": model,
                  "extra": {"recorded_by": "alight"}},
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": totals["prompt"], "total_completion_tokens": totals["completion"],
                          "total_steps": len(steps)},
        "extra": {"alight": {**episode_context(ep, run_name), "reward_detail": e.reward_detail,
                             "calls": len(calls)}},
    })


def _key(turn: Turn) -> tuple:
    return (turn.role, turn.kind, turn.text, turn.name, turn.call_id)


def _add_request_turn(steps: list[dict], turn: Turn, last_agent: dict | None, *, copied: bool) -> dict | None:
    """A turn the client sent: a tool result joins the agent step whose call it answers; other turns are steps."""
    if turn.kind == "tool_result":
        ids = {tc["tool_call_id"] for tc in (last_agent or {}).get("tool_calls") or []}
        target = last_agent if turn.call_id in ids else None
        if target is None:  # a result whose call is not in the told story (e.g. the first call of a rewrite)
            target = _step("system", "", copied)
            steps.append(target)
        result = {"content": turn.text}
        if target is last_agent:
            result["source_call_id"] = turn.call_id
        target.setdefault("observation", {"results": []})["results"].append(result)
        return last_agent
    if turn.role == "assistant":
        step = _step("agent", turn.text if turn.kind == "text" else "", copied)
        if turn.kind == "thinking":
            step["reasoning_content"] = turn.text
        if turn.kind == "tool_call":
            step["tool_calls"] = [_tool_call(turn)]
        # Consecutive pieces of one assistant message (text, then its tool calls) are one step.
        prev = steps[-1] if steps else None
        if prev is not None and prev is last_agent and prev.get("source") == "agent" and not prev.get("observation"):
            _merge(prev, step)
            return prev
        steps.append(step)
        return step
    source = "system" if turn.role == "system" else "user"
    steps.append(_step(source, turn.text, copied))
    return last_agent


def _add_reply(steps: list[dict], call: Call, reply: list[Turn]) -> dict | None:
    """The model's answer to one call: one agent step with its metrics; an error reply is a system step."""
    when = _iso(call.ended_at)
    errors = [t for t in reply if t.role == "error"]
    if errors or not reply:
        why = "; ".join(t.text for t in errors) or call.error or f"no reply (call status {call.status})"
        steps.append({"source": "system", "message": f"model call {call.seq} failed: {why}", "timestamp": when})
        return None
    text = "\n".join(t.text for t in reply if t.kind in ("text", "raw"))
    step: dict[str, Any] = {"source": "agent", "message": text, "timestamp": when, "llm_call_count": 1,
                            "model_name": call.model or call.client_model}
    thinking = [t.text for t in reply if t.kind == "thinking"]
    if thinking:
        step["reasoning_content"] = "\n".join(thinking)
    tools = [_tool_call(t) for t in reply if t.kind == "tool_call"]
    if tools:
        step["tool_calls"] = tools
    usage = call.usage or {}
    step["metrics"] = {
        "prompt_tokens": usage.get("prompt_tokens", usage.get("input_tokens")),
        "completion_tokens": usage.get("completion_tokens", usage.get("output_tokens")),
        "prompt_token_ids": call.prompt_token_ids, "completion_token_ids": call.completion_token_ids,
        "logprobs": call.completion_logprobs,
        "extra": {"call_id": call.id, "seq": call.seq, "finish_reason": call.finish_reason},
    }
    steps.append(step)
    return step


def _step(source: str, message: str, copied: bool) -> dict[str, Any]:
    step: dict[str, Any] = {"source": source, "message": message}
    if copied:
        step["is_copied_context"] = True
    return step


def _merge(into: dict, step: dict) -> None:
    if step.get("message"):
        into["message"] = "\n".join(filter(None, [into.get("message"), step["message"]]))
    if step.get("reasoning_content"):
        into["reasoning_content"] = "\n".join(filter(None, [into.get("reasoning_content"), step["reasoning_content"]]))
    if step.get("tool_calls"):
        into.setdefault("tool_calls", []).extend(step["tool_calls"])


def _tool_call(turn: Turn) -> dict[str, Any]:
    try:
        args = json.loads(turn.text) if turn.text else {}
    except ValueError:
        args = None
    if not isinstance(args, dict):  # ATIF wants an object; keep what the model wrote
        args = {"input": turn.text}
    # A call without an id (some protocols' history) gets a stable one from its content.
    made = "call-" + hashlib.sha256(f"{turn.name}\0{turn.text}".encode()).hexdigest()[:12]
    return {"tool_call_id": turn.call_id or made, "function_name": turn.name or "unknown",
            "arguments": args}


def _iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, timezone.utc).isoformat() if t else None


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def write_atif(source: Any, episodes: list[EpisodeSummary], out: Path | None) -> tuple[int, int]:
    """Each episode's trajectory: into folder `out` as <episode id>.json (Harbor's trajectory.json, one per
    episode), or as one JSON line each on stdout. Returns (written, left out for making no model call)."""
    import sys

    from agentlightning_cli.inspect.export import dumps

    written = skipped = 0
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for ep in episodes:
        doc = trajectory(source.run_name(ep.episode.run_id), ep, list(source.store.get_calls(ep.episode.id)))
        if doc is None:
            skipped += 1
            continue
        if out is None:
            sys.stdout.buffer.write(dumps(doc) + b"\n")
        else:
            (out / f"{ep.episode.id}.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        written += 1
    sys.stdout.flush()
    return written, skipped
