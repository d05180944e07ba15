"""Translator CPU cost: the Anthropic Messages, OpenAI Responses and Gemini translators on full-size harness
requests and 200-event streams, side by side with the floor every streamed event pays anyway (parsing vLLM's chunk).

Requests are the captured Claude Code / Codex shapes with their cut strings grown back to the captured length
("…[+N chars]") and the tool list filled to the captured count. No Gemini CLI request is captured yet: its row
uses the Claude Code request re-expressed in Gemini's shape (`as_gemini`: the same conversation, tools with
Gemini's UPPERCASE schema types, so the schema normalisation is paid). Prints a table and writes JSON.
Usage: python bench/translate.py [--events 200] [--out bench/results/translate.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from vllm_shapes import Completion, call, chat_chunks, chat_json, split  # noqa: E402

from agentlightning_cli.proxy import anthropic, gemini, responses  # noqa: E402

CUT = re.compile(r"…\[\+(\d+) chars\]$")


def full_size(value):
    """Grow every cut string back to its captured length with filler prose."""
    if isinstance(value, str):
        match = CUT.search(value)
        if match:
            filler = ("Use the tools to inspect files before editing them. " * (int(match[1]) // 50 + 1))
            return value[:match.start()] + filler[:int(match[1])]
        return value
    if isinstance(value, list):
        return [full_size(v) for v in value]
    if isinstance(value, dict):
        return {k: full_size(v) for k, v in value.items()}
    return value


def request(name: str, tools: int) -> dict:
    body = full_size(json.loads((ROOT / "tests/data/captures" / name).read_text())["body"])
    template = body["tools"][-1] if name.startswith("claude") else body["tools"][0]
    while len(body["tools"]) < tools:
        extra = copy.deepcopy(template)
        extra["name"] = f"{template['name']}{len(body['tools'])}"
        body["tools"].append(extra)
    return body


def _upper_types(schema):
    if isinstance(schema, dict):
        return {k: (v.upper() if k == "type" and isinstance(v, str) else _upper_types(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_upper_types(v) for v in schema]
    return schema


def as_gemini(claude_body: dict) -> dict:
    """A Messages request as Gemini's generateContent body: the chat form's turns as contents, tool calls and
    results as functionCall/functionResponse parts, tools as functionDeclarations."""
    chat, _ = anthropic.request_to_chat(claude_body)
    contents: list[dict] = []
    system = None
    for message in chat["messages"]:
        role = message["role"]
        if role == "system":
            system = {"parts": [{"text": message["content"]}]}
        elif role == "assistant":
            parts = [{"text": message["content"]}] if message.get("content") else []
            parts += [{"functionCall": {"id": c["id"], "name": c["function"]["name"],
                                        "args": json.loads(c["function"]["arguments"])}}
                      for c in message.get("tool_calls") or ()]
            contents.append({"role": "model", "parts": parts})
        elif role == "tool":
            part = {"functionResponse": {"id": message["tool_call_id"], "name": "tool",
                                         "response": {"output": message["content"]}}}
            if contents and contents[-1]["role"] == "user":
                contents[-1]["parts"].append(part)
            else:
                contents.append({"role": "user", "parts": [part]})
        else:
            contents.append({"role": "user", "parts": [{"text": message["content"]}]})
    declarations = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                     "parameters": _upper_types(t["function"]["parameters"])} for t in chat.get("tools", ())]
    return {"contents": contents, "systemInstruction": system, "tools": [{"functionDeclarations": declarations}],
            "generationConfig": {"maxOutputTokens": claude_body.get("max_tokens", 1024)}}


def per_call(fn, seconds: float = 0.5) -> float:
    """CPU seconds per call of fn, best of 3 timed batches."""
    n, best = 1, float("inf")
    while True:
        start = time.process_time()
        for _ in range(n):
            fn()
        spent = time.process_time() - start
        if spent > seconds / 10:
            break
        n *= 4
    for _ in range(3):
        start = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - start) / n)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/translate.json")
    args = parser.parse_args()
    cases = {
        "anthropic": (anthropic, request("claude-code-request-2.json", 24)),
        "responses": (responses, request("codex-request-2.json", 4)),
        "gemini": (gemini, as_gemini(request("claude-code-request-2.json", 24))),
    }
    text = Completion(text=split("x" * (3 * (args.events - 3)), 3))
    tool = Completion(calls=[call("call-1", "Bash", {"command": "y" * (4 * (args.events - 10))}, 4)],
                      finish_reason="tool_calls")
    rows = []
    for name, (module, body) in cases.items():
        size = len(json.dumps(body))
        reply = chat_json(Completion(text=split("Creating it."), calls=[call("c1", "Bash", {"command": "ls"})],
                                     finish_reason="tool_calls"))
        row = {"protocol": module.PROTOCOL, "request_bytes": size,
               "request_to_chat_us": per_call(lambda: module.request_to_chat(body)) * 1e6,
               "response_from_chat_us": per_call(
                   lambda: module.response_from_chat(reply, client_model="m", request=body)) * 1e6}
        for label, completion in (("text", text), ("tool_args", tool)):
            chunks = chat_chunks(completion)
            wire = [json.dumps(c, separators=(",", ":")) for c in chunks]

            def stream():
                translator = module.StreamTranslator(client_model="m", request=body)
                for chunk in chunks:
                    translator.feed(chunk)
                translator.finish()

            row[f"{label}_stream_events"] = len(chunks)
            row[f"{label}_us_per_event"] = per_call(stream) / len(chunks) * 1e6
            row[f"{label}_parse_floor_us_per_event"] = per_call(lambda: [json.loads(w) for w in wire]) / len(
                chunks) * 1e6
        rows.append(row)
    print(f"{'protocol':20} {'req KB':>7} {'req->chat':>10} {'chat->resp':>11} {'text/ev':>8} {'args/ev':>8}"
          f" {'parse/ev':>9}   (µs CPU; target ≤ 20 µs per event for the whole proxy)")
    for r in rows:
        print(f"{r['protocol']:20} {r['request_bytes'] / 1024:7.1f} {r['request_to_chat_us']:10.1f}"
              f" {r['response_from_chat_us']:11.1f} {r['text_us_per_event']:8.2f} {r['tool_args_us_per_event']:8.2f}"
              f" {r['text_parse_floor_us_per_event']:9.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"events": args.events, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
