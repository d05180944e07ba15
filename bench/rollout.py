"""`alight run`'s own cost per episode and its throughput, next to the harness run alone.

Against the scripted upstream (fake vLLM), mini-SWE-agent does one tool call that fixes calc.py, then submits
(2 LLM calls per episode); the reward runs the hidden unittest. For concurrency 1, 2 and 4:

  alight_cost_s   workspace preparation + registration + reward + store + cleanup, per episode: the episode's
                  wall time minus the harness process's own lifetime and the reward command's own time
  alight_epm      episodes per minute through the rollout (store, proxy, pipeline, sandbox by default)
  alone_epm       episodes per minute of the same harness run alone from a shell loop (`xargs -P C`): a
                  fresh copy of the repo, mini straight at the scripted upstream, no proxy, no reward
  ratio           alight_epm / alone_epm

Harness installs: HARNESS_TEST_HOME or ~/.cache/alight-test-home.

    python bench/rollout.py [--episodes 8] [--concurrency 1,2,4] [--sandbox bwrap|none]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "rollout.json"
CALC = "def add(a, b):\n    return a - b\n"
TEST = "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
FIX = "sed -i 's/a - b/a + b/' calc.py"


def task_set(root: Path, n: int) -> Path:
    (root / "repos" / "calc").mkdir(parents=True)
    (root / "repos" / "calc" / "calc.py").write_text(CALC)
    (root / "hidden" / "calc").mkdir(parents=True)
    (root / "hidden" / "calc" / "test_hidden_calc.py").write_text(TEST)
    line = {"repo": "repos/calc", "hidden_files": "hidden/calc", "reward": "python3 -m unittest -q test_hidden_calc",
            "prompt": "Fix add() in calc.py."}
    path = root / "tasks.jsonl"
    path.write_text("".join(json.dumps({**line, "id": f"t{i}"}) + "\n" for i in range(n)))
    return path


def script():
    from agentlightning_cli.scripted.fake_vllm import FakeScript
    from agentlightning_cli.scripted.harness_scripts import tool_then_finish

    return FakeScript(reply=tool_then_finish("mini-swe-agent", FIX), served_models=["policy-r0"])


async def through_alight(home: Path, work: Path, n: int, concurrency: int) -> dict:
    from agentlightning_cli.harness.install import require_installed
    from agentlightning_cli.harness.recipe import load
    from agentlightning_cli.rollout.episode import RoundContext
    from agentlightning_cli.rollout.round import run_round
    from agentlightning_cli.rollout.sources import SourceCache
    from agentlightning_cli.config import load_settings
    from agentlightning_cli.tasks import load_tasks
    from agentlightning_cli.testing.proxy_env import ProxyEnv

    settings = load_settings()  # the sandbox and its limits, as `alight run` resolves them
    tasks = load_tasks(task_set(work / "set", n))
    recipe = load("mini-swe-agent")
    installed = require_installed(recipe, home)
    async with ProxyEnv(work / "run", script()) as env:
        run = env.store.create_run("bench", {})
        rnd = env.store.create_round(run.id, 0, "policy-r0", None)
        ctx = RoundContext(store=env.store, proxy=env.proxy, recipe=recipe, installed=installed, run_id=run.id,
                           round_id=rnd.id, run_dir=work / "run", sources=SourceCache(work / "run" / "sources"),
                           sandbox=settings.sandbox, limits=settings.episode_limits, stopper=env.stopper)
        t0 = time.monotonic()
        ended = await run_round(ctx, 0, tasks, 1, concurrency)  # the round `alight run` plays, progress included
        wall = time.monotonic() - t0
    bad = [(e.status, e.outcome, e.why) for e in ended if e.status != "done" or e.reward != 1.0]
    if bad:
        raise SystemExit(f"episodes did not all solve: {bad}")
    costs = [e.timings["prepare_s"] + e.timings["run_s"] - e.timings["harness_own_s"] - e.timings["reward_s"]
             for e in ended]
    return {"wall_s": wall, "epm": n / wall * 60, "alight_cost_s": statistics.mean(costs),
            "alight_cost_max_s": max(costs), "harness_own_s": statistics.mean(e.timings["harness_own_s"] for e in ended),
            "reward_s": statistics.mean(e.timings["reward_s"] for e in ended),
            "prepare_s": statistics.mean(e.timings["prepare_s"] for e in ended)}


ALONE = r'''
set -e
d=$(mktemp -d "$WORK/alone.XXXXXX")
cp -r "$REPO/." "$d/"
mkdir -p "$d/.h"
cat > "$d/.h/cfg.yaml" <<CFG
model:
  model_name: "hosted_vllm/policy-r0"
  cost_tracking: ignore_errors
  model_kwargs: {api_base: "$URL/v1", api_key: "x"}
agent: {step_limit: 30, cost_limit: 0}
run: {task: "Fix add() in calc.py."}
CFG
cd "$d"
HOME="$d/.h" MSWEA_GLOBAL_CONFIG_DIR="$d/.h/cfg" "$MINI" -c mini.yaml -c "$d/.h/cfg.yaml" --yolo --exit-immediately \
  -o "$d/.h/traj.json" > "$d/.h/out" 2>&1
grep -q 'a + b' calc.py
'''


def alone(home: Path, work: Path, n: int, concurrency: int) -> dict:
    from agentlightning_cli.harness.install import require_installed
    from agentlightning_cli.harness.recipe import load
    from agentlightning_cli.scripted.fake_vllm import FakeVLLM

    mini = require_installed(load("mini-swe-agent"), home).executable
    repo = work / "alone-repo"
    repo.mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MSWEA_", "ALIGHT_"))}
    env.update(MSWEA_CONFIGURED="true", MSWEA_SILENT_STARTUP="1", MSWEA_COST_TRACKING="ignore_errors",
               MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT="2", LITELLM_LOCAL_MODEL_COST_MAP="True",
               NO_PROXY="127.0.0.1,localhost", WORK=str(work), REPO=str(repo), MINI=str(mini))
    (work / "one.sh").write_text(ALONE)
    with FakeVLLM(script()) as fake:
        env["URL"] = fake.url
        t0 = time.monotonic()
        subprocess.run(f"seq {n} | xargs -P {concurrency} -I{{}} bash {work / 'one.sh'}", shell=True, check=True,
                       env=env)
        wall = time.monotonic() - t0
    return {"wall_s": wall, "epm": n / wall * 60}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--sandbox", choices=["bwrap", "none"], default=None,
                        help="episode sandbox for the alight rows (default: the setting, bwrap)")
    args = parser.parse_args()
    if args.sandbox:
        os.environ["ALIGHT_SANDBOX"] = args.sandbox
    home = Path(os.environ.get("HARNESS_TEST_HOME") or Path.home() / ".cache" / "alight-test-home")
    rows = []
    for c in [int(x) for x in args.concurrency.split(",")]:
        with tempfile.TemporaryDirectory(prefix="alight-bench-rollout-") as tmp:
            a = asyncio.run(through_alight(home, Path(tmp) / "a", args.episodes, c))
            b = alone(home, Path(tmp) / "b", args.episodes, c)
        rows.append({"concurrency": c, "episodes": args.episodes, "alight": a, "alone": b,
                     "ratio": a["epm"] / b["epm"]})
        print(f"concurrency {c}: alight {a['epm']:.1f} ep/min (own cost {a['alight_cost_s']:.2f} s/episode), "
              f"alone {b['epm']:.1f} ep/min", file=sys.stderr, flush=True)
    print(f"\n{'conc':>4} {'alight ep/min':>14} {'alone ep/min':>13} {'ratio':>6} {'alight cost s/ep':>17} "
          f"{'(max)':>6} {'harness s':>10} {'reward s':>9} {'prep s':>7}")
    for r in rows:
        a = r["alight"]
        print(f"{r['concurrency']:>4} {a['epm']:>14.1f} {r['alone']['epm']:>13.1f} {r['ratio']:>6.2f} "
              f"{a['alight_cost_s']:>17.3f} {a['alight_cost_max_s']:>6.2f} {a['harness_own_s']:>10.2f} "
              f"{a['reward_s']:>9.2f} {a['prepare_s']:>7.2f}")
    load = os.getloadavg()[0]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"rows": rows, "sandbox": os.environ.get("ALIGHT_SANDBOX", "bwrap (default)"),
                                   "load_1min": load, "cpus": os.cpu_count(), "time": time.time()}, indent=2) + "\n")
    print(f"\nload {load:.2f} on {os.cpu_count()} CPUs; wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
