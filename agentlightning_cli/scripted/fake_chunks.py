"""vLLM-shaped chat-completions bodies and SSE events for a scripted turn (see fake_vllm.py)."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any, Iterator

from agentlightning_cli.scripted import fake_tokens as tok


def _dumps(obj: Any) -> str:
    # pydantic's model_dump_json: compact separators, raw UTF-8
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _completion(body: dict, turn: dict) -> tuple[str, list[dict], list[int], str]:
    """(content, tool_calls in OpenAI shape, completion ids, finish_reason) for a scripted turn."""
    calls = [
        {
            "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
            "type": "function",
            "function": {
                "name": c["name"],
                "arguments": c["arguments"] if isinstance(c.get("arguments"), str) else json.dumps(c.get("arguments") or {}),
            },
        }
        for c in turn.get("tool_calls") or []
    ]
    content = turn.get("content") or ""
    ids = tok.text_ids(tok.assistant_text(content, calls))
    finish = turn.get("finish_reason") or ("tool_calls" if calls else "stop")
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(limit, int) and len(ids) >= limit:
        ids, finish, calls = ids[:limit], "length", []
        content = "".join(tok.token_text(i) for i in ids)
    else:
        ids.append(tok.IM_END)
    return content, calls, ids, finish


def _logprobs(body: dict, ids: list[int], start: int) -> dict | None:
    if not body.get("logprobs"):
        return None
    k = body.get("top_logprobs") or 0
    content = []
    for pos, token_id in enumerate(ids, start):
        text = tok.token_text(token_id)
        lp = tok.logprob_of(token_id, pos)
        top = [{"token": text, "logprob": lp, "bytes": list(text.encode())}]
        top += [
            {"token": tok.token_text(token_id + j), "logprob": lp - j, "bytes": list(tok.token_text(token_id + j).encode())}
            for j in range(1, k)
        ]
        content.append({"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": top[:k]})
    return {"content": content}


def _usage(prompt_ids: list[int], ids: list[int]) -> dict:
    return {"prompt_tokens": len(prompt_ids), "total_tokens": len(prompt_ids) + len(ids), "completion_tokens": len(ids)}


def chat_response(body: dict, turn: dict, prompt_ids: list[int], request_id: str, created: int, model: str) -> dict:
    content, calls, ids, finish = _completion(body, turn)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content if (content or not calls) else None,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
    }
    if calls:
        message["tool_calls"] = calls
    message["reasoning"] = turn.get("reasoning")
    want_ids = bool(body.get("return_token_ids"))
    choice = {
        "index": 0,
        "message": message,
        "logprobs": _logprobs(body, ids, 0),
        "finish_reason": finish,
        "stop_reason": None,
        "token_ids": ids if want_ids else None,
        "routed_experts": None,
    }
    usage = _usage(prompt_ids, ids) | {"prompt_tokens_details": None, "completion_tokens_details": None}
    return {
        "id": request_id, "object": "chat.completion", "created": created, "model": model, "choices": [choice],
        "service_tier": None, "system_fingerprint": None, "usage": usage, "prompt_logprobs": None,
        "prompt_token_ids": prompt_ids if want_ids else None, "prompt_text": None,
        "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
    }


def _split(ids: list[int], parts: int) -> list[list[int]]:
    size, extra = divmod(len(ids), parts)
    out, at = [], 0
    for n in range(parts):
        step = size + (1 if n < extra else 0)
        out.append(ids[at : at + step])
        at += step
    return out


def _deltas(content: str, calls: list[dict], ids: list[int], per_event: int) -> Iterator[tuple[dict, list[int]]]:
    """(delta, token ids) pairs for all but the last token; tool calls stream name first, then argument pieces."""
    n_text = min(len(content), len(ids))
    for i in range(0, n_text, per_event):
        yield {"content": "".join(tok.token_text(t) for t in ids[i : i + per_event])}, ids[i : i + per_event]
    rest = ids[n_text:]
    if calls:
        pieces = iter(_split(rest, 3 * len(calls)))
        for index, call in enumerate(calls):
            head = {"index": index, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"]}}
            yield {"tool_calls": [head]}, next(pieces)
            args = call["function"]["arguments"]
            for part in (args[: len(args) // 2], args[len(args) // 2 :]):
                yield {"tool_calls": [{"index": index, "function": {"arguments": part}}]}, next(pieces)
    elif rest:
        yield {"content": "".join(tok.token_text(t) for t in rest)}, rest


def stream_events(body: dict, turn: dict, prompt_ids: list[int], request_id: str, created: int, model: str,
                  target_events: int | None = None) -> Iterator[bytes]:
    content, calls, ids, finish = _completion(body, turn)
    want_ids = bool(body.get("return_token_ids"))
    head = {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model}
    first = head | {
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
        "prompt_token_ids": prompt_ids if want_ids else None,
        "prompt_text": None,
    }
    yield f"data: {_dumps(first)}\n\n".encode()
    per_event = max(1, math.ceil(len(ids) / target_events)) if target_events else 1
    pos = 0
    for delta, piece in _deltas(content, calls, ids[:-1], per_event):
        choice = {"index": 0, "delta": delta, "logprobs": _logprobs(body, piece, pos), "finish_reason": None,
                  "token_ids": piece if want_ids else None}
        pos += len(piece)
        yield f"data: {_dumps(head | {'choices': [choice]})}\n\n".encode()
    last = ids[pos:]
    tail = "".join(tok.token_text(t) for t in last if t != tok.IM_END)
    final = {"index": 0, "delta": {} if calls else {"content": tail}, "logprobs": _logprobs(body, last, pos),
             "finish_reason": finish, "stop_reason": None, "token_ids": last if want_ids else None}
    yield f"data: {_dumps(head | {'choices': [final]})}\n\n".encode()
    options = body.get("stream_options") or {}
    if options.get("include_usage"):
        yield f"data: {_dumps(head | {'choices': [], 'usage': _usage(prompt_ids, ids)})}\n\n".encode()
    yield b"data: [DONE]\n\n"
