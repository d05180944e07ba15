"""Serving benchmark: real vLLM (CPU) with the tiny model, direct and through the recording proxy.

Measures: start-to-healthy time and RSS of vLLM's process tree with VLLM_ENABLE_V1_MULTIPROCESSING=1 and =0
(alight's default), completion tokens/s at concurrency 1 and 16 (JSON and SSE), direct to vLLM vs through
`alight proxy` (a separate process, as in `alight serve`), alternating direct/proxy per repetition, and the
time to make, load and unload a LoRA adapter. All requests go to the policy-r0 adapter, as alight sends them.
Usage: python bench/serve.py [--tokens 64] [--reps 4] [--out bench/results/serve.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

from agentlightning_cli.config import ServeSettings
from agentlightning_cli.serve.adapters import AdapterClient, make_adapter
from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.serve.vllm import VLLMServer, post_json

SETTINGS = ServeSettings(max_model_len=2048, max_lora_rank=8, max_loras=2, startup_timeout_s=300)
PROMPT = [{"role": "user", "content": "Write a long story about the file system and the tests."}]


def tree_rss_mb(pid: int) -> float:
    root = psutil.Process(pid)
    procs = [root] + root.children(recursive=True)
    return sum(p.memory_info().rss for p in procs if p.is_running()) / 2**20


def start(model: Path, log: Path, multiprocessing: str) -> tuple[VLLMServer, dict]:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = multiprocessing
    srv = VLLMServer(model, SETTINGS, log).start(warm_up=False)
    t = time.monotonic()
    srv.warm_up(SETTINGS.served_model_name)
    first = time.monotonic() - t
    row = {"multiprocessing": multiprocessing, "healthy_s": round(srv.healthy_after_s, 1),
           "first_request_s": round(first, 2), "rss_mb": round(tree_rss_mb(srv.pid)),
           "processes": 1 + len(psutil.Process(srv.pid).children(recursive=True))}
    return srv, row


async def one(session: aiohttp.ClientSession, url: str, headers: dict, tokens: int, stream: bool) -> int:
    body = {"model": "policy-r0", "messages": PROMPT, "max_tokens": tokens, "ignore_eos": True, "temperature": 1.0,
            "stream": stream, **({"stream_options": {"include_usage": True}} if stream else {})}
    async with session.post(url, json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        if not stream:
            return (await resp.json())["usage"]["completion_tokens"]
        usage = 0
        async for line in resp.content:
            if line.startswith(b"data: {") and b'"usage"' in line:
                usage = (json.loads(line[6:]).get("usage") or {}).get("completion_tokens") or usage
        return usage


async def throughput(url: str, headers: dict, concurrency: int, requests: int, tokens: int, stream: bool) -> float:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        sem = asyncio.Semaphore(concurrency)

        async def task() -> int:
            async with sem:
                return await one(session, url, headers, tokens, stream)

        t = time.monotonic()
        done = await asyncio.gather(*(task() for _ in range(requests)))
        return sum(done) / (time.monotonic() - t)


def start_proxy(upstream: str, store: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "agentlightning_cli", "proxy", "--upstream", upstream,
                             "--store", str(store), "--model", "policy-r0"],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    for line in proc.stderr:
        m = re.search(r"recording (http://\S+) ->", line)
        if m:
            return proc, m.group(1)
    raise RuntimeError("proxy did not start")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--out", default="bench/results/serve.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="alight-bench-serve-"))
    t = time.monotonic()
    model = build_tiny_model(work / "tiny")
    result: dict = {"tiny_model_build_s": round(time.monotonic() - t, 1), "startup": [], "throughput": [],
                    "cpu_count": os.cpu_count(), "load_avg_at_start": os.getloadavg()[0]}

    srv, row = start(model, work / "vllm-mp1.log", "1")
    t = time.monotonic()
    srv.stop()
    row["stop_s"] = round(time.monotonic() - t, 1)
    result["startup"].append(row)
    srv, row = start(model, work / "vllm-mp0.log", "0")
    result["startup"].append(row)
    adapters = AdapterClient(srv.base_url)
    proxy = None
    try:
        t = time.monotonic()
        r0 = make_adapter(model, work / "adapters" / "r0", rank=8)
        made = time.monotonic() - t
        t = time.monotonic()
        adapters.load("policy-r0", r0)
        result["adapter"] = {"make_s": round(made, 2), "load_s": round(time.monotonic() - t, 3)}
        srv.warm_up("policy-r0")
        proxy, proxy_url = start_proxy(srv.base_url, work / "run")
        targets = {"direct": (f"{srv.base_url}/v1/chat/completions", {}),
                   "proxy": (f"{proxy_url}/e/bench/v1/chat/completions", {"authorization": "Bearer bench"})}
        for concurrency, requests in ((1, 6), (16, 32)):
            for stream in (False, True):
                rates: dict[str, list[float]] = {"direct": [], "proxy": []}
                for rep in range(args.reps):
                    # Alternate who goes first: on a shared machine, load drifts within a repetition.
                    for name in (("direct", "proxy") if rep % 2 == 0 else ("proxy", "direct")):
                        url, headers = targets[name]
                        rates[name].append(asyncio.run(throughput(url, headers, concurrency, requests, args.tokens, stream)))
                direct, via = statistics.median(rates["direct"]), statistics.median(rates["proxy"])
                result["throughput"].append({"concurrency": concurrency, "stream": stream, "requests": requests,
                                             "direct_tok_s": round(direct), "proxy_tok_s": round(via),
                                             "proxy_over_direct": round(via / direct, 3),
                                             "samples": {k: [round(x) for x in v] for k, v in rates.items()},
                                             "load_avg": round(os.getloadavg()[0], 1)})
        t = time.monotonic()
        r1 = make_adapter(model, work / "adapters" / "r1", rank=8, seed=1, random_b=True)
        made = time.monotonic() - t
        t = time.monotonic()
        adapters.load("policy-r1", r1)
        loaded = time.monotonic() - t
        t = time.monotonic()
        post_json(f"{srv.base_url}/v1/chat/completions", {"model": "policy-r1", "messages": PROMPT, "max_tokens": 1})
        first = time.monotonic() - t
        t = time.monotonic()
        adapters.unload("policy-r1")
        result["adapter"].update(next_make_s=round(made, 2), next_load_s=round(loaded, 3),
                                 next_first_request_s=round(first, 3), unload_s=round(time.monotonic() - t, 3))
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(10)
        srv.stop()
    report(result)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


def report(r: dict) -> None:
    print(f"tiny model build: {r['tiny_model_build_s']} s   (load average at start {r['load_avg_at_start']:.1f})")
    print("\nvLLM startup            healthy_s  first_req_s  RSS_MB  processes")
    for s in r["startup"]:
        print(f"  multiprocessing={s['multiprocessing']}      {s['healthy_s']:>8}  {s['first_request_s']:>11}  "
              f"{s['rss_mb']:>6}  {s['processes']:>9}")
    print("\ncompletion tok/s (median)  concurrency  stream   direct   proxy  proxy/direct  load")
    for t in r["throughput"]:
        print(f"                           {t['concurrency']:>11}  {str(t['stream']):>6}  {t['direct_tok_s']:>7}  "
              f"{t['proxy_tok_s']:>6}  {t['proxy_over_direct']:>12}  {t['load_avg']:>4}")
    a = r["adapter"]
    print(f"\nadapter: make r0 {a['make_s']} s, load r0 {a['load_s']} s; make r1 {a['next_make_s']} s, "
          f"load r1 {a['next_load_s']} s, first request on r1 {a['next_first_request_s']} s, unload {a['unload_s']} s")


if __name__ == "__main__":
    main()
