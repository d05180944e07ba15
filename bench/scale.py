"""Scale-out numbers for one head (issue: past one machine). Three measurements:

1. upstreams   the real proxy in front of 1 or 2 scripted vLLM servers, `--episodes` concurrent clients (one
               episode each, `--calls` sequential chat calls, ~1.5 KB bodies), interleaved rounds, median calls/s:
               - `capacity`: each server answers `--capacity` requests at once after `--delay-ms` (a model
                 server with a full batch), so a second server should double what the round gets through;
               - `instant`: servers that answer at once, so only the proxy's own work counts (what routing
                 over two servers costs against one).
2. store       the recorder's write path (proxy/recorder.py: batches of 32 per transaction) fed a round's traffic:
               `--store-episodes` episodes of bench/store.py's growing agent calls, interleaved call by call as
               concurrent episodes arrive; sustained calls/s and MB/s of request bodies, and from it the episode
               rate one head's single SQLite writer can take at that size.
3. executors   a round of `--executor-episodes` mini-SWE-agent episodes (bench/rollout.py's task: one fix, then
               submit, a unittest reward; sandboxed) at `--executor-concurrency`, with the local executor and
               with the Ray executor on a Ray started on this machine (that many `alight_episode` slots),
               interleaved rounds after one warm-up pair: episodes/min each and Ray's cost per episode (the
               head's wait from sending the episode to its result, minus the node's own time on it).

    python bench/scale.py [--only upstreams,store,executors] [--episodes 16] [--calls 10] [--capacity 4]
                          [--delay-ms 20] [--rounds 3] [--store-episodes 16] [--store-calls 40]
                          [--executor-episodes 8] [--executor-concurrency 2] [--out bench/results/scale.json]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "scale.json"
PROMPT = "Please fix the failing test in the repository. " * 32  # ~1.5 KB request body


async def _round(env, episodes: int, calls: int) -> float:
    """calls/s of `episodes` concurrent clients, each its own episode, `calls` sequential calls each."""
    import aiohttp

    keys = [env.episode() for _ in range(episodes)]
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": PROMPT}]})

    async def client(session, ep: str, key: str) -> None:
        for _ in range(calls):
            async with session.post(env.url(ep), data=body, headers={"Authorization": f"Bearer {key}",
                                                                    "Content-Type": "application/json"}) as resp:
                await resp.read()
                assert resp.status == 200, resp.status

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session, ep, key) for ep, key in keys))
        return episodes * calls / (time.perf_counter() - started)


def fake_server(folder: Path, script: dict) -> tuple[subprocess.Popen, str]:
    """A scripted vLLM server in its own process (not this one's threads): (process, URL)."""
    path = folder / f"script-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(script))
    proc = subprocess.Popen([sys.executable, "-m", "agentlightning_cli.scripted.fake_vllm", "--port", "0",
                             "--script", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    if "listening on " not in line:
        proc.kill()
        raise RuntimeError(f"the scripted server did not start: {line}")
    return proc, line.split("listening on ", 1)[1].strip()


async def upstreams(episodes: int, calls: int, capacity: int, delay_ms: float, rounds: int) -> dict:
    from agentlightning_cli.testing.proxy_env import POLICY, start_env, stop_env

    out: dict = {}
    folder = Path(tempfile.mkdtemp(prefix="alight-bench-scale-fakes-"))
    for kind, script in (("capacity", dict(capacity=capacity, delay_s=delay_ms / 1000)), ("instant", {})):
        servers = [fake_server(folder, {"served_models": [POLICY], **script}) for _ in range(2)]
        urls_all = [url for _, url in servers]
        rates: dict[str, list[float]] = {"1 server": [], "2 servers": []}
        try:
            for _ in range(rounds):
                for label, urls in (("1 server", urls_all[:1]), ("2 servers", urls_all)):
                    with tempfile.TemporaryDirectory(prefix="alight-bench-scale-") as tmp:
                        env = await start_env(Path(tmp), upstream=urls)
                        try:
                            await _round(env, 2, 2)  # connections and first-call paths warm, not timed
                            rates[label].append(await _round(env, episodes, calls))
                        finally:
                            await stop_env(env)
        finally:
            for proc, _ in servers:
                proc.terminate()
                proc.wait(timeout=10)
        med = {label: round(statistics.median(v), 1) for label, v in rates.items()}
        out[kind] = {"calls_per_s": med, "ratio_2_over_1": round(med["2 servers"] / med["1 server"], 2),
                     "runs": rates}
    out.update(episodes=episodes, calls_per_episode=calls, server_capacity=capacity, delay_ms=delay_ms, rounds=rounds)
    return out


def store_rate(episodes: int, calls: int) -> dict:
    """Sustained write rate of the recorder's batched path on a round's interleaved traffic."""
    from agentlightning_cli.proxy.recorder import BATCH
    from agentlightning_cli.store import CallRecord, Store

    spec = importlib.util.spec_from_file_location("bench_store", ROOT / "bench" / "store.py")
    bench_store = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_store)
    traffic = [bench_store.build_episode(calls, 500, seed=7 + e) for e in range(episodes)]
    with tempfile.TemporaryDirectory(prefix="alight-bench-scale-store-") as tmp:
        store = Store.open(Path(tmp))
        try:
            ids = [store.create_episode(None, None, "bench", 0, "bench", "key").id for _ in range(episodes)]
            records, body_bytes = [], 0
            for i in range(calls):  # call i of every episode, then call i + 1: as concurrent episodes arrive
                for e, ep in enumerate(ids):
                    call = traffic[e][i]
                    now = time.time()
                    body_bytes += len(call["client"]) + len(call["upstream"])
                    records.append(CallRecord(
                        episode_id=ep, protocol="openai-chat", method="POST", path="/v1/chat/completions",
                        status="ok", http_status=200, stream=True, client_request=call["client"],
                        upstream_request=call["upstream"], response=b"data: {}\n\n", started_at=now, ended_at=now,
                        prompt_token_ids=call["prompt"], completion_token_ids=call["completion"],
                        completion_logprobs=call["logprobs"]))
            started = time.perf_counter()
            for at in range(0, len(records), BATCH):
                store.add_calls(records[at:at + BATCH], full=False)
            seconds = time.perf_counter() - started
        finally:
            store.close()
    n = len(records)
    return {"episodes": episodes, "calls_per_episode": calls, "calls": n, "seconds": round(seconds, 2),
            "calls_per_s": round(n / seconds, 1), "request_body_mb_per_s": round(body_bytes / seconds / 1e6, 1),
            "episodes_per_s_at_this_size": round(n / seconds / calls, 2),
            "prompt_tokens_at_last_call": len(traffic[0][-1]["prompt"])}


def _bench_rollout():
    spec = importlib.util.spec_from_file_location("bench_rollout", ROOT / "bench" / "rollout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _executor_round(home: Path, work: Path, n: int, concurrency: int, executor) -> dict:
    """One round of n mini-SWE-agent episodes (bench/rollout.py's task and script) played as `alight run` plays it,
    here (executor None) or through the Ray executor."""
    from agentlightning_cli.config import load_settings
    from agentlightning_cli.harness.install import require_installed
    from agentlightning_cli.harness.recipe import load
    from agentlightning_cli.rollout.episode import RoundContext
    from agentlightning_cli.rollout.round import run_round
    from agentlightning_cli.rollout.sources import SourceCache
    from agentlightning_cli.tasks import load_tasks
    from agentlightning_cli.testing.proxy_env import ProxyEnv

    rollout = _bench_rollout()
    settings = load_settings()
    tasks = load_tasks(rollout.task_set(work / "set", n))
    recipe = load("mini-swe-agent")
    installed = require_installed(recipe, home)
    async with ProxyEnv(work / "run", rollout.script()) as env:
        run = env.store.create_run("bench", {})
        rnd = env.store.create_round(run.id, 0, "policy-r0", None)
        ctx = RoundContext(store=env.store, proxy=env.proxy, recipe=recipe, installed=installed, run_id=run.id,
                           round_id=rnd.id, run_dir=work / "run", sources=SourceCache(work / "run" / "sources"),
                           sandbox=settings.sandbox, limits=settings.episode_limits, stopper=env.stopper,
                           executor=executor)
        if executor is not None:
            executor.set_proxy(env.proxy.base_url)
        t0 = time.monotonic()
        ended = await run_round(ctx, 0, tasks, 1, concurrency)
        wall = time.monotonic() - t0
    bad = [(e.status, e.why) for e in ended if e.status != "done" or e.reward != 1.0]
    if bad:
        raise SystemExit(f"episodes did not all solve: {bad}")
    out = {"wall_s": wall, "epm": n / wall * 60}
    if executor is not None:  # the head's wait per episode beyond what the node itself spent on it
        out["ray_overhead_ms"] = statistics.mean(
            (e.timings["head_wait_s"] - e.timings["prepare_s"] - e.timings["run_s"]) * 1000 for e in ended)
    return out


def executors(episodes: int, concurrency: int, rounds: int) -> dict:
    """Episodes per minute with the local executor and the Ray executor (a Ray started on this machine with
    `concurrency` episode slots) at the same concurrency, interleaved rounds; Ray's cost per episode."""
    from agentlightning_cli.rollout.ray_executor import RayExecutor

    home = Path(os.environ.get("HARNESS_TEST_HOME") or Path.home() / ".cache" / "alight-test-home")
    os.environ["ALIGHT_HOME"] = str(home)  # the Ray workers started below inherit it
    ray_executor = RayExecutor(None, concurrency)
    ray_executor.connect()
    runs: dict[str, list[dict]] = {"local": [], "ray": []}
    try:
        for i in range(rounds + 1):  # the first pair warms both (Ray's worker processes import alight once)
            for label, executor in (("local", None), ("ray", ray_executor)):
                with tempfile.TemporaryDirectory(prefix="alight-bench-scale-exec-") as tmp:
                    row = asyncio.run(_executor_round(home, Path(tmp), episodes, concurrency, executor))
                if i:
                    runs[label].append(row)
    finally:
        ray_executor.close()
    local = statistics.median(r["epm"] for r in runs["local"])
    ray = statistics.median(r["epm"] for r in runs["ray"])
    return {"episodes": episodes, "concurrency": concurrency, "rounds": rounds,
            "episodes_per_min": {"local": round(local, 2), "ray": round(ray, 2)},
            "ratio_ray_over_local": round(ray / local, 3),
            "ray_overhead_ms_per_episode": round(statistics.median(r["ray_overhead_ms"] for r in runs["ray"]), 1),
            "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--capacity", type=int, default=4)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--store-episodes", type=int, default=16)
    ap.add_argument("--store-calls", type=int, default=40)
    ap.add_argument("--executor-episodes", type=int, default=8)
    ap.add_argument("--executor-concurrency", type=int, default=2)
    ap.add_argument("--only", default="upstreams,store,executors",
                    help="comma-separated parts to measure; the others keep their numbers from --out")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    only = {p.strip() for p in args.only.split(",") if p.strip()}
    result = json.loads(args.out.read_text()) if args.out.is_file() else {}
    result["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "load": os.getloadavg()[0]}
    if "upstreams" in only:
        result["upstreams"] = up = asyncio.run(upstreams(args.episodes, args.calls, args.capacity, args.delay_ms,
                                                         args.rounds))
        print(f"{'proxy, calls/s (median)':34} {'1 server':>9} {'2 servers':>10} {'ratio':>6}")
        for kind in ("capacity", "instant"):
            row = up[kind]
            label = f"{kind} ({args.capacity} at once, {args.delay_ms:g} ms)" if kind == "capacity" else kind
            print(f"{label:34} {row['calls_per_s']['1 server']:>9} {row['calls_per_s']['2 servers']:>10} "
                  f"{row['ratio_2_over_1']:>6}")
    if "store" in only:
        result["store"] = st = store_rate(args.store_episodes, args.store_calls)
        print(f"store writes: {st['calls_per_s']} calls/s sustained ({st['calls']} calls of {st['episodes']} "
              f"interleaved episodes, {st['request_body_mb_per_s']} MB/s of request bodies; prompts grow to "
              f"{st['prompt_tokens_at_last_call']} tokens): {st['episodes_per_s_at_this_size']} such episodes/s")
    if "executors" in only:
        result["executors"] = ex = executors(args.executor_episodes, args.executor_concurrency, args.rounds)
        label = f"{ex['episodes']} x mini-SWE-agent, {ex['concurrency']} at once"
        print(f"{'episodes/min (median)':34} {'local':>9} {'ray':>10} {'ratio':>6}  Ray's cost per episode")
        print(f"{label:34} {ex['episodes_per_min']['local']:>9} {ex['episodes_per_min']['ray']:>10} "
              f"{ex['ratio_ray_over_local']:>6}  {ex['ray_overhead_ms_per_episode']} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
