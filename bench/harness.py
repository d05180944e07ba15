"""Harness start-up and per-episode overhead: each real harness, one scripted 2-call episode, through the proxy.

For every harness (same run, interleaved repetitions) it measures:
  first_call_s   launch -> the first LLM call reaches the proxy (harness start-up cost)
  wall_s         launch -> process gone and cleaned up
  llm_s          time spent inside the 2 LLM calls (scripted upstream: ~instant)
  harness_s      wall_s - llm_s: what the harness itself costs per episode (imports, tools, exit)
  runner_s       alight's own cost around the process: render/write files before, settle/count/reap after
Harnesses must be installed in the shared cache (HARNESS_TEST_HOME or ~/.cache/alight-test-home).

    python bench/harness.py [--reps 3] [--only codex,claude-code]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "harness.json"
HARNESSES = ["mini-swe-agent", "openhands", "claude-code", "codex"]


async def one_episode(name: str, home: Path, work: Path) -> dict:
    from agentlightning_cli.harness import recipe as recipes
    from agentlightning_cli.testing.proxy_env import SmokeEnvironment
    from agentlightning_cli.harness.install import require_installed
    from agentlightning_cli.scripted.harness_scripts import OUT_FILE, tool_then_finish

    recipe = recipes.load(name)
    inst = require_installed(recipe, home)
    async with SmokeEnvironment(work / "run", tool_then_finish(name)) as env:
        spec = env.new_episode(recipe, work / "ws", f"Create {OUT_FILE}.", timeout_s=300)
        t0 = time.monotonic()
        outcome = await env.run(recipe, inst, spec)
        total = time.monotonic() - t0
        calls = env.store.get_calls(spec.episode_id)
    if outcome.status != "finished":
        raise SystemExit(f"{name}: {outcome.status}: {outcome.reason}")
    llm = sum(c.ended_at - c.started_at for c in calls)
    return {"first_call_s": outcome.first_call_s, "wall_s": outcome.wall_s, "llm_s": llm,
            "harness_s": outcome.wall_s - llm, "runner_s": total - outcome.wall_s, "calls": len(calls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default=",".join(HARNESSES))
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    home = Path(os.environ.get("HARNESS_TEST_HOME") or Path.home() / ".cache" / "alight-test-home")
    samples: dict[str, list[dict]] = {n: [] for n in names}
    for rep in range(args.reps):  # interleaved so machine load drifts affect every harness alike
        for name in names:
            with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as work:
                samples[name].append(asyncio.run(one_episode(name, home, Path(work))))
            print(f"rep {rep + 1}/{args.reps} {name}: {samples[name][-1]['wall_s']:.2f} s", file=sys.stderr)
    keys = ["first_call_s", "wall_s", "llm_s", "harness_s", "runner_s"]
    summary = {n: {k: round(statistics.median(s[k] for s in samples[n]), 3) for k in keys} for n in names}
    print(f"{'harness':16} " + " ".join(f"{k:>13}" for k in keys) + "   (medians of %d, seconds)" % args.reps)
    for name in names:
        print(f"{name:16} " + " ".join(f"{summary[name][k]:13.3f}" for k in keys))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "what": "one scripted 2-call episode per harness through the real proxy and store (scripted upstream)",
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "reps": args.reps, "median": summary, "samples": samples, "measured_at": time.time(),
    }, indent=2))
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
