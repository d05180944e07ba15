"""`alight inspect` benchmark on a big run: 10,000 episodes and 200,000 calls, written through the store API.

Measures what a user waits for: `alight inspect list RUN` (a fresh process, table and --json), the first paint
of the interactive app (a fresh `alight inspect RUN` in a pseudo-terminal, until the episode table is on the
screen), opening an episode with 100 calls in the app (Textual's headless pilot: from Enter until the call
table is drawn), and export throughput (`alight inspect export --format har|jsonl`, calls per second).
The generated store is cached (same parameters: reused) so reruns measure only inspect.

(Not bench/inspect.py: a script's folder comes first on sys.path, and a file named inspect.py there
would shadow the standard library's `inspect` for every other bench script.)

Usage: python bench/inspect_cli.py [--episodes 10000] [--calls 200000] [--cache DIR] [--out bench/results/inspect.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import pty
import random
import resource
import select
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from agentlightning_cli.store import Store, TrainStep
from agentlightning_cli.testing.call_bodies import Step, conversation

ROOT = Path(__file__).resolve().parent.parent
ALIGHT = [sys.executable, "-m", "agentlightning_cli"]
PROTOCOLS = [("openai-chat", "mini-swe-agent", False), ("openai-chat", "openhands", False),
             ("anthropic-messages", "claude-code", True), ("openai-responses", "codex", True)]
_WORDS = ("def self return import value error test file line path class data result config assert print index "
          "token request None True False list dict open read write status patch").split()


def _plan(episodes: int, calls: int, big: int = 10, big_calls: int = 100) -> list[int]:
    """Calls per episode: `big` episodes of `big_calls`, the rest share what is left as evenly as it goes."""
    rest, left = episodes - big, calls - big * big_calls
    base, extra = divmod(left, rest)
    return [big_calls] * big + [base + 1] * extra + [base] * (rest - extra)


def _steps(rng: random.Random, n: int, stream: bool) -> list[Step]:
    def text(words: int) -> str:
        return " ".join(rng.choices(_WORDS, k=words))

    steps = [Step(text=text(rng.randrange(5, 30)) if rng.random() < 0.6 else None,
                  tool=("bash", {"command": f"grep -n {rng.choice(_WORDS)} src/{rng.choice(_WORDS)}.py"}),
                  tool_output=text(rng.randrange(20, 120)), stream=stream, prompt_growth=10) for _ in range(n - 1)]
    return [*steps, Step(text="Done. " + text(20), stream=stream)]


def _write_episodes(job: tuple[Path, str, list[str], list[int], int, int]) -> int:
    """Worker: episodes [lo, hi) of the plan with their calls, batched ~400 calls a transaction."""
    run_dir, run_id, round_ids, plan, lo, hi = job
    rng = random.Random(lo)
    per_round = len(plan) // len(round_ids)
    written, batch = 0, []
    with Store.open(run_dir) as store:
        for i in range(lo, hi):
            r = min(i // per_round, len(round_ids) - 1)
            protocol, harness, stream = PROTOCOLS[i % len(PROTOCOLS)]
            ep = store.create_episode(run_id, round_ids[r], f"task-{(i % per_round) // 4:04d}", i % 4, harness,
                                      f"k{i}", episode_id=f"ep-{i:06d}")
            records = conversation(ep.id, protocol, f"Fix issue {i}: " + " ".join(rng.choices(_WORDS, k=40)),
                                   _steps(rng, plan[i], stream), start=1.7e9 + i * 30, policy=f"policy-r{r}", seed=i)
            batch.extend(records)
            failed = rng.random() < 0.05
            outcome = "harness_error" if failed else rng.choices(["finished", "timeout", "budget_exceeded"], [90, 5, 5])[0]
            store.update_episode(ep.id, status="failed" if failed else "done", outcome=outcome,
                                 reward=None if failed else float(rng.random() < 0.2 + 0.1 * r),
                                 started_at=records[0].started_at, ended_at=records[-1].ended_at + 1,
                                 error="harness exited 1: Traceback ..." if failed else None)
            if len(batch) >= 400:
                written += len(store.add_calls(batch, full=False))
                batch = []
        written += len(store.add_calls(batch, full=False)) if batch else 0
    return written


def generate(run_dir: Path, episodes: int, calls: int, rounds: int = 5, workers: int = 2) -> dict:
    """Fill a fresh store: `rounds` rounds, tasks x attempts per round, four harnesses, ~5% failed episodes.
    Several processes write at once (the store is safe for that), each its own slice of episodes."""
    import multiprocessing

    started = time.perf_counter()
    plan = _plan(episodes, calls)
    with Store.open(run_dir) as store:
        run = store.create_run("bench", {"harness": "mixed"})
        round_ids = [store.create_round(run.id, r, f"policy-r{r}", None if r == 0 else f"adapters/r{r}").id
                     for r in range(rounds)]
    cuts = [episodes * k // (workers * 8) for k in range(workers * 8 + 1)]
    jobs = [(run_dir, run.id, round_ids, plan, lo, hi) for lo, hi in zip(cuts, cuts[1:])]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        written = sum(pool.imap_unordered(_write_episodes, jobs))
    with Store.open(run_dir) as store:
        for r in range(rounds - 1):
            store.add_train_steps([TrainStep(run_id=run.id, round_idx=r, step=s, loss=1.0 / (s + r + 1),
                                             reward_mean=0.2 + 0.1 * r, rows=40, merged_calls=400)
                                   for s in range(1, 11)])
        store.finish_run(run.id, "done")
    return {"episodes": episodes, "calls": written, "seconds": round(time.perf_counter() - started, 1),
            "db_mb": round((run_dir / "alight.db").stat().st_size / 2**20, 1)}


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd: list[str], repeat: int, cpu: list[float] | None = None) -> list[float]:
    """Wall seconds of each run of `cmd`; its CPU seconds (user + system) are appended to `cpu`. On a shared
    machine the wall time includes waiting for a core, so both are reported."""
    out = []
    for _ in range(repeat):
        t, c = time.perf_counter(), _child_cpu()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        out.append(time.perf_counter() - t)
        if cpu is not None:
            cpu.append(_child_cpu() - c)
    return out


def first_paint(run_dir: Path, marker: str, timeout: float = 30.0) -> float:
    """Seconds from spawning `alight inspect RUN` in a pseudo-terminal until `marker` (an episode id in the
    table) has been written to the screen; then `q` quits it."""
    pid, fd = pty.fork()
    if pid == 0:  # child: a 160x48 terminal, like a roomy SSH session
        os.environ.update(TERM="xterm-256color", COLUMNS="160", LINES="48")
        os.execv(sys.executable, [*ALIGHT, "inspect", str(run_dir)])
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
    start, seen, painted = time.perf_counter(), b"", None
    while time.perf_counter() - start < timeout:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
            if painted is None and marker.encode() in seen:
                painted = time.perf_counter() - start
                os.write(fd, b"q")
    try:
        os.waitpid(pid, 0)
    finally:
        os.close(fd)
    if painted is None:
        raise RuntimeError(f"the app did not show {marker} within {timeout} s; screen tail: {seen[-400:]!r}")
    return painted


async def _shown(app, pilot, episode_id: str) -> None:
    """Push the episode's screen and wait until its call table is populated and drawn."""
    from agentlightning_cli.inspect.episode_view import EpisodeScreen

    app.push_screen(EpisodeScreen(app.source, episode_id))
    await pilot.pause()
    while not isinstance(app.screen, EpisodeScreen) or not app.screen.loaded:
        await pilot.pause(0.005)
    await pilot.pause()  # one more frame: the table is drawn


def _in_app(run_dir: Path, episode_id: str, repeat: int, cpu: list[float], step) -> list[float]:
    """Headless app on run_dir; `step(app, pilot)` returns the (wall, cpu) start it measured from, then one more
    frame is drawn and the time since is one sample; the episode is closed between repeats."""
    from agentlightning_cli.inspect.app import InspectApp

    async def go() -> list[float]:
        times = []
        app = InspectApp(run_dir)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            for _ in range(repeat):
                t, c = await step(app, pilot)
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
                app.pop_screen()
                await pilot.pause()
        return times

    return asyncio.run(go())


def open_episode(run_dir: Path, episode_id: str, repeat: int, cpu: list[float]) -> list[float]:
    """In-process, headless: seconds from opening the episode until its call table is populated and drawn."""

    async def step(app, pilot):
        started = time.perf_counter(), time.process_time()
        await _shown(app, pilot, episode_id)
        return started

    return _in_app(run_dir, episode_id, repeat, cpu, step)


def open_rows(run_dir: Path, episode_id: str, repeat: int, cpu: list[float], wait: float = 0.0) -> list[float]:
    """In-process, headless: seconds from `t` on an open 100-call episode until the trainer's rows (read from the
    episode's token ids, with where each prefix broke) are drawn. `t` comes as soon as the calls are drawn (the
    rows are read then), or `wait` seconds later like a user who looked at the calls first (the view reads them
    in a thread meanwhile)."""

    async def step(app, pilot):
        await _shown(app, pilot, episode_id)
        if wait:
            await pilot.pause(wait)
        started = time.perf_counter(), time.process_time()
        await pilot.press("t")
        await pilot.pause()  # one more frame: the rows are drawn
        return started

    return _in_app(run_dir, episode_id, repeat, cpu, step)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "alight-bench")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "inspect.json")
    ap.add_argument("--no-export", action="store_true",
                    help="skip the (slow) exports; keep the export numbers of the previous results file, marked so")
    args = ap.parse_args()
    run_dir = args.cache / f"inspect-{args.episodes}-{args.calls}"
    if not (run_dir / ".complete").exists():
        shutil.rmtree(run_dir, ignore_errors=True)
        print(f"generating {args.episodes} episodes / {args.calls} calls into {run_dir} ...", file=sys.stderr)
        gen = generate(run_dir, args.episodes, args.calls)
        (run_dir / ".complete").write_text(json.dumps(gen))
    gen = json.loads((run_dir / ".complete").read_text())
    with Store.open(run_dir) as store:
        summaries = store.episode_summaries()
        big = next(s.episode.id for s in summaries if s.calls == 100)
        first = summaries[0].episode.id
    load_before = os.getloadavg()
    tmp = args.cache / "export"
    tmp.mkdir(parents=True, exist_ok=True)
    rows, cpu = {}, {}
    for name, extra in (("inspect list (table)", []), ("inspect list --json", ["--json"])):
        cpu[name] = []
        rows[name] = _timed([*ALIGHT, "inspect", "list", str(run_dir), *extra], args.repeat, cpu[name])
    rows["app first paint"] = [first_paint(run_dir, first) for _ in range(args.repeat)]
    cpu["open a 100-call episode"] = []
    rows["open a 100-call episode"] = open_episode(run_dir, big, args.repeat, cpu["open a 100-call episode"])
    cpu["its training rows (t)"] = []
    rows["its training rows (t)"] = open_rows(run_dir, big, args.repeat, cpu["its training rows (t)"])
    cpu["its rows (t after 1 s)"] = []
    rows["its rows (t after 1 s)"] = open_rows(run_dir, big, args.repeat, cpu["its rows (t after 1 s)"], wait=1.0)
    exports = {}
    if args.no_export and args.out.exists():
        exports = {fmt: {**e, "from_previous_run": True} for fmt, e in json.loads(args.out.read_text())["export"].items()}
    for fmt in () if args.no_export else ("har", "jsonl"):
        spent: list[float] = []
        t = _timed([*ALIGHT, "inspect", "export", str(run_dir), "--format", fmt, "--out", str(tmp / f"all.{fmt}")], 1,
                   spent)[0]
        exports[fmt] = {"seconds": round(t, 2), "cpu_s": round(spent[0], 2), "calls_per_s": round(gen["calls"] / t),
                        "calls_per_cpu_s": round(gen["calls"] / spent[0]),
                        "mb": round((tmp / f"all.{fmt}").stat().st_size / 2**20, 1)}
    targets = {"inspect list (table)": 1.0, "inspect list --json": 1.0, "app first paint": 1.5,
               "open a 100-call episode": 0.3, "its training rows (t)": 0.3,
               "its rows (t after 1 s)": 0.3}
    result = {"store": gen, "load_avg_before": load_before, "load_avg_after": os.getloadavg(), "cores": os.cpu_count(),
              "python": platform.python_version(),
              "timings_s": {k: {"median": round(statistics.median(v), 3), "runs": [round(x, 3) for x in v],
                                "cpu_median": round(statistics.median(cpu[k]), 3) if cpu.get(k) else None,
                                "target": targets[k]} for k, v in rows.items()}, "export": exports}
    print(f"store: {gen['episodes']} episodes, {gen['calls']} calls, {gen['db_mb']} MB (generated in {gen['seconds']} s)")
    print(f"load average {load_before[0]:.1f} before, {result['load_avg_after'][0]:.1f} after, {os.cpu_count()} cores")
    print(f"{'measure':<28}{'wall':>9}{'cpu':>9}{'target':>9}  runs (wall)")
    for k, v in result["timings_s"].items():
        ok = "ok" if v["median"] < v["target"] else "over"
        cpu_s = "-" if v["cpu_median"] is None else f"{v['cpu_median']:.3f}s"
        print(f"{k:<28}{v['median']:>8.3f}s{cpu_s:>9}{v['target']:>8.1f}s  {v['runs']} {ok}")
    for fmt, e in exports.items():
        print(f"export {fmt:<21}{e['calls_per_s']:>9} calls/s wall, {e['calls_per_cpu_s']} per CPU s"
              f"  ({e['seconds']} s, {e['mb']} MB)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
