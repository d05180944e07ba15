"""Call records shaped like the proxy's, for each protocol, built without a proxy or a model.

A "conversation" is a task prompt and a list of steps (the model's reply, then what the harness feeds back).
Each builder returns one CallRecord per step, with the bodies a real client sends (the whole history every time),
the answer it saw (JSON, or the SSE bytes for streamed calls), the chat-completions request the proxy sent
upstream for translated protocols, and token ids that grow by prefix like a real episode's. Used by the inspect
tests and bench/inspect.py to fill a store through the store API.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentlightning_cli.store import CallRecord

TOOLS_CHAT = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
               "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
TOOLS_ANTHROPIC = [{"name": "Bash", "description": "Run a shell command.",
                    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]
TOOLS_RESPONSES = [{"type": "function", "name": "shell", "description": "Run a shell command.",
                    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}]
SYSTEM = "You are a coding agent. Work in the repository; run commands with the tool; finish with a summary."


@dataclass
class Step:
    """One model call: the reply (text and/or one tool call) and the tool's output fed back after it."""

    text: str | None = None
    tool: tuple[str, dict[str, Any]] | None = None
    tool_output: str = ""
    stream: bool = False
    status: str = "ok"  # "upstream_error": vLLM failed, the client got a 502 and nothing was sampled
    prompt_growth: int = 40  # new prompt tokens past the previous call's prompt + completion


_VOCAB = range(3, 32000)
_LOGPROB_STEPS = [i / 997 for i in range(997)]


@dataclass
class Tokens:
    """Token ids that behave like a real episode's: each prompt starts with the previous prompt + completion."""

    rng: random.Random = field(default_factory=lambda: random.Random(0))
    prompt: list[int] = field(default_factory=list)

    def next_call(self, growth: int, completion_len: int) -> tuple[list[int], list[int], list[float]]:
        self.prompt = self.prompt + self.rng.choices(_VOCAB, k=growth)
        completion = self.rng.choices(_VOCAB, k=completion_len)
        logprobs = [-2 * r for r in self.rng.choices(_LOGPROB_STEPS, k=completion_len)]
        return list(self.prompt), completion, logprobs

    def accept(self, completion: list[int]) -> None:
        self.prompt = self.prompt + completion


def _dump(data: Any) -> bytes:
    return orjson.dumps(data)


def _sse(events: list[tuple[str | None, Any]]) -> bytes:
    out = b""
    for name, payload in events:
        data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
        out += (f"event: {name}\n" if name else "").encode() + f"data: {data}\n\n".encode()
    return out


def _words(step: Step) -> int:
    return max(4, len((step.text or "").split()) * 2 + (12 if step.tool else 0))


def _chat_message(step: Step, call_id: str) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": step.text}
    if step.tool:
        msg["tool_calls"] = [{"id": call_id, "type": "function",
                              "function": {"name": step.tool[0], "arguments": json.dumps(step.tool[1])}}]
    return msg


def _finish(step: Step) -> str:
    return "tool_calls" if step.tool else "stop"


def _chat_reply(step: Step, call_id: str, model: str, n: int, usage: dict, stream: bool) -> bytes:
    if not stream:
        return _dump({"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1700000000, "model": model,
                      "choices": [{"index": 0, "message": _chat_message(step, call_id),
                                   "finish_reason": _finish(step)}], "usage": usage})
    head = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 1700000000, "model": model}
    events: list[tuple[str | None, Any]] = [(None, {**head, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                                              "content": ""}}]})]
    for word in (step.text or "").split(" ") if step.text else []:
        events.append((None, {**head, "choices": [{"index": 0, "delta": {"content": word + " "}}]}))
    if step.tool:
        args = json.dumps(step.tool[1])
        events.append((None, {**head, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": call_id, "type": "function", "function": {"name": step.tool[0], "arguments": ""}}]}}]}))
        events.append((None, {**head, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": args}}]}}]}))
    events.append((None, {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": _finish(step)}],
                          "usage": usage}))
    events.append((None, "[DONE]"))
    return _sse(events)


def _anthropic_reply(step: Step, call_id: str, model: str, n: int, usage: dict, stream: bool) -> bytes:
    content: list[dict[str, Any]] = []
    if step.text:
        content.append({"type": "text", "text": step.text})
    if step.tool:
        content.append({"type": "tool_use", "id": call_id, "name": step.tool[0], "input": step.tool[1]})
    stop = "tool_use" if step.tool else "end_turn"
    a_usage = {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]}
    message = {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": model, "content": content,
               "stop_reason": stop, "stop_sequence": None, "usage": a_usage}
    if not stream:
        return _dump(message)
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": {
        **message, "content": [], "stop_reason": None, "usage": {**a_usage, "output_tokens": 0}}})]
    for i, block in enumerate(content):
        start = {"type": "text", "text": ""} if block["type"] == "text" else {**block, "input": {}}
        events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}))
        delta = ({"type": "text_delta", "text": block["text"]} if block["type"] == "text"
                 else {"type": "input_json_delta", "partial_json": json.dumps(block["input"])})
        events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": a_usage["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return _sse(events)


def _responses_output(step: Step, call_id: str, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if step.text:
        out.append({"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": step.text, "annotations": []}]})
    if step.tool:
        out.append({"type": "function_call", "id": f"fc_{n}", "call_id": call_id, "name": step.tool[0],
                    "arguments": json.dumps(step.tool[1]), "status": "completed"})
    return out


def _responses_reply(step: Step, call_id: str, model: str, n: int, usage: dict, stream: bool) -> bytes:
    response = {"id": f"resp_{n}", "object": "response", "created_at": 1700000000, "status": "completed",
                "model": model, "output": _responses_output(step, call_id, n),
                "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                          "total_tokens": usage["total_tokens"]}}
    if not stream:
        return _dump(response)
    events: list[tuple[str | None, Any]] = [
        ("response.created", {"type": "response.created", "sequence_number": 0,
                              "response": {**response, "status": "in_progress", "output": []}})]
    for i, item in enumerate(response["output"]):
        events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": i,
                                                      "item": item}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": i,
                                                     "item": item}))
    events.append(("response.completed", {"type": "response.completed", "response": response}))
    return _sse(events)


_REPLIES = {"openai-chat": _chat_reply, "anthropic-messages": _anthropic_reply, "openai-responses": _responses_reply}
_PATHS = {"openai-chat": "/v1/chat/completions", "anthropic-messages": "/v1/messages",
          "openai-responses": "/v1/responses"}
_CLIENT_MODELS = {"openai-chat": "gpt-4o-mini", "anthropic-messages": "claude-sonnet-4-5",
                  "openai-responses": "gpt-5-codex"}


def _opening(protocol: str, task: str) -> list[dict[str, Any]]:
    if protocol == "openai-chat":
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    if protocol == "anthropic-messages":
        return [{"role": "user", "content": [{"type": "text", "text": task}]}]
    return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]}]


def _turns(protocol: str, step: Step, call_id: str, n: int) -> list[dict[str, Any]]:
    """What one answered step adds to the history the client resends: the reply, then the tool's output."""
    if protocol == "openai-chat":
        return [_chat_message(step, call_id),
                {"role": "tool", "tool_call_id": call_id, "content": step.tool_output} if step.tool
                else {"role": "user", "content": step.tool_output or "Continue."}]
    if protocol == "anthropic-messages":
        content: list[dict[str, Any]] = [{"type": "text", "text": step.text}] if step.text else []
        if step.tool:
            content.append({"type": "tool_use", "id": call_id, "name": step.tool[0], "input": step.tool[1]})
        return [{"role": "assistant", "content": content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id,
                                              "content": step.tool_output}] if step.tool else
                 [{"type": "text", "text": step.tool_output or "Continue."}]}]
    return [*_responses_output(step, call_id, n),
            {"type": "function_call_output", "call_id": call_id, "output": step.tool_output} if step.tool
            else {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                                  "text": step.tool_output or "Continue."}]}]


def _client_body(protocol: str, history: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    """The whole request as the client sends it: system prompt, task, and every earlier turn."""
    model = _CLIENT_MODELS[protocol]
    if protocol == "openai-chat":
        return {"model": model, "messages": history, "tools": TOOLS_CHAT, "stream": stream}
    if protocol == "anthropic-messages":
        return {"model": model, "max_tokens": 32000, "system": [{"type": "text", "text": SYSTEM}],
                "messages": history, "tools": TOOLS_ANTHROPIC, "metadata": {"user_id": "session-1"}, "stream": stream}
    return {"model": model, "instructions": SYSTEM, "input": history, "tools": TOOLS_RESPONSES,
            "reasoning": {"effort": "medium"}, "store": False, "stream": stream}


def conversation(episode_id: str, protocol: str, task: str, steps: list[Step], *, start: float = 1_700_000_000.0,
                 policy: str = "policy-r0", seed: int = 0) -> list[CallRecord]:
    """The CallRecords one episode of `steps` leaves in the store, in order."""
    rng = random.Random(seed)
    tokens = Tokens(rng=rng)
    history = _opening(protocol, task)
    records = []
    clock = start
    for n, step in enumerate(steps):
        call_id = f"call_{seed}_{n}"
        body = _client_body(protocol, history, step.stream)
        raw = _dump(body)
        growth = step.prompt_growth + (len(task) // 4 + 60 if n == 0 else len(step.tool_output) // 4)
        prompt, completion, logprobs = tokens.next_call(growth, _words(step))
        sampling = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 2048}
        upstream = raw if protocol == "openai-chat" else _dump({"model": policy, "messages": [
            {"role": "system", "content": SYSTEM}, {"role": "user", "content": task}], "stream": step.stream,
            "return_token_ids": True, "logprobs": True, **sampling})
        dropped = {"openai-chat": None, "anthropic-messages": {"metadata": {"user_id": "session-1"}},
                   "openai-responses": {"reasoning": {"effort": "medium"}, "store": False}}[protocol]
        began, clock = clock, clock + 0.4 + rng.random()
        record = dict(episode_id=episode_id, protocol=protocol, method="POST", path=_PATHS[protocol], stream=step.stream,
                      client_request=raw, client_headers={"host": "127.0.0.1:8400", "content-type": "application/json",
                                                          "user-agent": f"{protocol}-client/1.0"},
                      upstream_request=upstream, client_model=body["model"], model=policy, sampling=sampling,
                      dropped=dropped, started_at=began, ended_at=clock)
        if step.status != "ok":
            error = "upstream answered 500: engine died"
            records.append(CallRecord(**record, status=step.status, http_status=502, error=error,
                                      prompt_token_ids=None, first_byte_at=None,
                                      response=_dump({"error": {"message": error, "type": "upstream_error"}})))
            continue
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(completion),
                 "total_tokens": len(prompt) + len(completion)}
        response = _REPLIES[protocol](step, call_id, body["model"], n, usage, step.stream)
        upstream_response = None if step.stream else _dump({
            "id": f"chatcmpl-{n}", "object": "chat.completion", "model": policy, "prompt_token_ids": prompt,
            "choices": [{"index": 0, "message": _chat_message(step, call_id), "finish_reason": _finish(step),
                         "token_ids": completion}], "usage": usage})
        records.append(CallRecord(**record, status="ok", http_status=200, response=response,
                                  upstream_response=upstream_response, prompt_token_ids=prompt,
                                  completion_token_ids=completion, completion_logprobs=logprobs,
                                  finish_reason=_finish(step), usage=usage, first_byte_at=began + 0.05))
        tokens.accept(completion)
        history = history + _turns(protocol, step, call_id, n)
    return records
