"""Each real harness on the same scripted 2-step episode through the real proxy and store: what it costs, how many
calls it makes, how well its calls merge into training rows, and what the proxy adds to each call.

Every harness (tests/harness_support.HARNESSES that are installed, or --only) runs the same episode: the scripted
upstream (scripted/fake_vllm.py, vLLM's wire format with prompt and completion token ids and logprobs, its own
one-token-per-character tokenizer) answers with one shell tool call that writes out.txt, then the harness's way of
finishing (tests/harness_support.scripted: Aider, a text-mode harness, gets a file listing it rejects, then one it
writes). Repetitions are interleaved (rep 1 of every harness, then rep 2, ...) so load drifts on a shared machine
hit every harness alike: compare harnesses within one run, not runs with each other.

Per harness (medians over --reps; every repetition is kept under `samples`):
  calls            LLM calls the episode made (the agent's steps plus any side calls: titles, next-speaker checks)
  rows             training rows train/rows.build_rows (the trainer's own, merge strict) makes of those calls
  call_tokens      sum over the calls the trainer keeps (train/rows.usable_calls) of prompt + completion ids:
                   what one row per call would feed the trainer
  row_tokens       sum over the rows of their length (prompt + completion ids): what the trainer is fed
  merge_ratio      call_tokens / row_tokens. 1.0: nothing merged (one row per call, each repeating the whole
                   history); 2 calls that merge into one row give 1 + (call 1's tokens / call 2's tokens), < 2
                   since call 2's prompt holds call 1. Higher: fewer tokens trained for the same calls.
                   None: no row (the trainer kept no call; `dropped` in the samples says why).
  merge_ratio_if_sampled  the same with greedy calls counted as sampled: a harness that sends temperature 0
                   (Aider) trains nothing as it comes (greedy calls are never trained, train/rows.usable_calls)
                   unless `proxy.sampling.temperature` is set; this is the merge its calls would get then
  proxy_ms         the proxy's own time per call (median over the episode's calls): from the proxy taking the
                   request (Proxy._dispatch) to its answer being done, less the time any upstream request was
                   outstanding (UpstreamPool.post to the last byte read). A JSON answer is held until its record
                   is durable in SQLite, so that write is included; a stream's record is handed to the store's
                   writer thread after the last byte, so it is not (the stream's translation and writes are). The
                   call records hold only the call's start, first byte and end, so the upstream time is taken
                   here, by wrapping the proxy's own HTTP client (nothing else changes). The scripted upstream
                   runs in a thread of this process.
  first_call_s     launch -> the first LLM call reaches the proxy (the harness's start-up cost)
  exit_s           the last call's end -> process gone (its wind-down: final report, flushes, exit)
  wall_s           launch -> process gone and cleaned up
  llm_s            the calls' recorded time (started_at -> ended_at, summed; scripted upstream: ~instant)
  harness_s        wall_s - llm_s: what the harness itself costs per episode (imports, tools, exit)
  runner_s         alight's own cost around the process: render/write files before, settle/count/reap after
Token counts are the scripted tokenizer's (one per character, ~4x a real BPE count): compare ratios, not sizes.
Each sample also keeps proxy_ms_max and, per call: proxy_ms_per_call, between_calls_s (the harness's own time
between two calls: running the tool, building the next request), request_kb (the client's request body), streamed,
call_statuses and temperatures (as sent upstream); and the trainer's breaks and dropped counts.
Harnesses must be installed in the shared cache (HARNESS_TEST_HOME or ~/.cache/alight-test-home). Continuation is
`render` (the scripted upstream has no render/generate endpoints); its tokenizer keeps the prefix property, as
real chat templates do for these two steps.

    python bench/harness.py [--reps 3] [--only codex,claude-code] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "harness.json"
KEYS = ["calls", "rows", "call_tokens", "row_tokens", "merge_ratio", "merge_ratio_if_sampled", "proxy_ms",
        "first_call_s", "exit_s", "wall_s", "llm_s", "harness_s", "runner_s"]


class ProxyClock:
    """Each request the proxy handles (in, out) and each upstream request it makes (sent, last byte read), by
    wrapping Proxy._dispatch and the proxy's upstream client; episodes run one at a time, calls one after another."""

    def __init__(self) -> None:
        self.handled: list[tuple[float, float]] = []
        self.upstream: list[tuple[float, float]] = []

    def install(self) -> None:
        from agentlightning_cli.proxy import server
        from agentlightning_cli.testing.upstream_clock import time_upstream_requests

        clock, dispatch = self, server.Proxy._dispatch

        async def timed_dispatch(self, request):
            t0 = time.time()
            try:
                return await dispatch(self, request)
            finally:
                clock.handled.append((t0, time.time()))

        server.Proxy._dispatch = timed_dispatch
        time_upstream_requests(lambda _path, t0, t1: clock.upstream.append((t0, t1)))

    def own_seconds(self, call: Any) -> float | None:
        """The proxy's time on this call with no upstream request outstanding (None: no handler window found)."""
        windows = [w for w in self.handled if w[0] <= call.started_at + 1e-6 <= w[1] + 1e-6]
        if not windows:
            return None
        t_in, t_out = max(windows)
        spans = [(a, b) for a, b in self.upstream if a >= t_in - 1e-6 and b <= t_out + 1e-6]
        return (t_out - t_in) - covered(spans)


def covered(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of these intervals."""
    total, reach = 0.0, float("-inf")
    for t0, t1 in sorted(spans):
        if t1 > reach:
            total += t1 - max(t0, reach)
            reach = t1
    return total


def merge(calls: list) -> dict:
    """The trainer's rows of one episode's calls (merge strict) against one row per kept call; and the same with
    greedy calls relabelled as sampled at temperature 1.0 (copies, for this count only)."""
    from agentlightning_cli.train.rows import is_greedy

    out = _rows(calls)
    sampled = [dataclasses.replace(c, sampling={**(c.sampling or {}), "temperature": 1.0}) if is_greedy(c) else c
               for c in calls]
    if_sampled = _rows(sampled)
    out.update(merge_ratio_if_sampled=if_sampled["merge_ratio"], breaks_if_sampled=if_sampled["breaks"])
    out["temperatures"] = [(c.sampling or {}).get("temperature") for c in calls]
    return out


def _rows(calls: list) -> dict:
    from agentlightning_cli.scripted.fake_tokens import IM_END, SPECIAL_TEXT, token_text
    from agentlightning_cli.train.rows import RowContext, build_rows, usable_calls

    ctx = RowContext(decode=lambda ids: "".join(token_text(i) for i in ids),
                     special_tokens=tuple(SPECIAL_TEXT.values()), eot_ids=frozenset({IM_END}))
    kept = usable_calls(calls, collections.Counter())
    report = build_rows("bench", calls, ctx, "strict")
    call_tokens = sum(len(c.prompt_token_ids) + len(c.completion_token_ids) for c in kept)
    row_tokens = sum(r.length for r in report.rows)
    return {"rows": len(report.rows), "call_tokens": call_tokens, "row_tokens": row_tokens,
            "merge_ratio": round(call_tokens / row_tokens, 3) if row_tokens else None,
            "breaks": dict(report.breaks), "dropped": dict(report.dropped)}


async def one_episode(name: str, home: Path, work: Path, clock: ProxyClock) -> dict:
    from agentlightning_cli.harness import recipe as recipes
    from agentlightning_cli.harness.install import require_installed
    from agentlightning_cli.scripted.harness_scripts import OUT_FILE
    from agentlightning_cli.testing.proxy_env import SmokeEnvironment
    from tests.harness_support import scripted

    recipe = recipes.load(name)
    inst = require_installed(recipe, home)
    async with SmokeEnvironment(work / "run", scripted(recipe)) as env:
        spec = env.new_episode(recipe, work / "ws", f"Create {OUT_FILE}.", timeout_s=300)
        t0 = time.monotonic()
        outcome = await env.run(recipe, inst, spec)
        total = time.monotonic() - t0
        calls = env.store.get_calls(spec.episode_id)
    if outcome.status != "finished":
        raise SystemExit(f"{name}: {outcome.status}: {outcome.reason}")
    llm = sum(c.ended_at - c.started_at for c in calls)
    # launch, on the records' clock: the first call's start less the runner's first_call_s
    launched = calls[0].started_at - outcome.first_call_s if calls and outcome.first_call_s is not None else None
    own = [clock.own_seconds(c) for c in calls]
    own_ms = [round(1000 * s, 3) for s in own if s is not None]
    return {"calls": len(calls), **merge(calls),
            "proxy_ms": round(statistics.median(own_ms), 3) if own_ms else None,
            "proxy_ms_max": max(own_ms) if own_ms else None, "proxy_ms_per_call": own_ms,
            "call_statuses": [c.status for c in calls], "streamed": [c.stream for c in calls],
            "request_kb": [round(len(c.client_request) / 1024, 1) for c in calls], "first_call_s": outcome.first_call_s,
            "wall_s": outcome.wall_s, "llm_s": round(llm, 4), "harness_s": round(outcome.wall_s - llm, 4),
            "runner_s": round(total - outcome.wall_s, 4),
            "between_calls_s": [round(b.started_at - a.ended_at, 3) for a, b in zip(calls, calls[1:])],
            "exit_s": round(outcome.wall_s - (calls[-1].ended_at - launched), 3) if launched is not None else None,
            "version": inst.version}


def default_harnesses(home: Path) -> tuple[list[str], list[str]]:
    """(installed, not installed) of the harnesses the tests run (a new recipe joins by joining that list)."""
    from agentlightning_cli.harness import recipe as recipes
    from agentlightning_cli.harness.install import is_installed
    from tests.harness_support import HARNESSES

    have = [n for n in HARNESSES if is_installed(recipes.load(n), home)]
    return have, [n for n in HARNESSES if n not in have]


def table(summary: dict, reps: int) -> list[str]:
    head = f"{'harness':16} " + " ".join(f"{k:>12}" for k in KEYS)
    lines = [f"medians of {reps} (seconds; proxy in ms per call; tokens per episode)", head]
    for name, row in summary.items():
        lines.append(f"{name:16} " + " ".join(f"{_show(row.get(k)):>12}" for k in KEYS))
    return lines


def _show(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated recipe names (default: every installed one "
                                                   "of tests/harness_support.HARNESSES)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    from tests.harness_support import harness_home

    home = harness_home()
    names, missing = ([n for n in args.only.split(",") if n], []) if args.only else default_harnesses(home)
    how = {"command": " ".join(["python", *sys.argv]),
           "started_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cpus": os.cpu_count(),
           "python": sys.version.split()[0], "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
           "harness_home": str(home)}
    clock = ProxyClock()
    clock.install()
    samples: dict[str, list[dict]] = {n: [] for n in names}
    for rep in range(args.reps):  # interleaved so machine load drifts affect every harness alike
        for name in names:
            with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as work:
                samples[name].append(asyncio.run(one_episode(name, home, Path(work), clock)))
            s = samples[name][-1]
            print(f"rep {rep + 1}/{args.reps} {name}: {s['wall_s']:.2f} s, {s['calls']} calls, {s['rows']} rows, "
                  f"proxy {s['proxy_ms']} ms/call", file=sys.stderr)
    summary = {n: {k: _median([s[k] for s in samples[n]]) for k in KEYS} for n in names}
    for name in names:
        summary[name]["version"] = samples[name][0]["version"]
    how.update(load_avg_now=[round(x, 2) for x in os.getloadavg()],
               now=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    lines = [f"bench/harness.py: {how['command']}",
             f"started {how['started_at']} on {how['cpus']} CPUs, load {how['load_avg_at_start']} at start, "
             f"{how['load_avg_now']} at {how['now']}", *table(summary, args.reps)]
    print("\n".join(lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "what": "one scripted 2-step episode per harness through the real proxy and store (scripted upstream), "
                "interleaved repetitions (bench/harness.py)",
        "how_run": how,
        "settings": {"reps": args.reps, "harnesses": names, "not_installed": missing, "merge": "strict",
                     "continuation": "render", "upstream": "scripted/fake_vllm.py (vLLM wire format, token ids)"},
        "median": summary, "samples": samples, "table": lines, "measured_at": time.time(),
    }, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
