"""What `sandbox: container` costs a command against bubblewrap: one shell command (`true`, and a Python start)
run through the task shell (tasks/shell.run_shell) in each sandbox, alternating, median wall ms of --repeat runs.
An episode pays it three times (setup, harness, reward); a proxy call pays nothing extra in either (the
sandbox's loopback listener is handed to the proxy).

Added time per proxy call: the same client as bench/sandbox.py (sequential ~1 KB chat requests, keep-alive, to
the real proxy in front of the scripted upstream) inside a container (the default path: the forwarder hands the
container's loopback listener to the proxy), inside bubblewrap, and directly on the host, interleaved per round.

Grading time per instance: the SWE-bench-format instance the tests build (tests/container_support.py: a small
repository at /testbed, its eval script, parse_log_pytest) graded by the official code (swebench_grade.grade: a
fresh container, the official apply sequence, the eval script, get_eval_report) with its gold patch (resolved) and
with a patch that applies but fixes nothing, --grade-repeat times each, median seconds. A real SWE-bench image adds
its own eval script's time (each Verified script re-runs the project's install and its tests).

    python bench/container.py [--image localhost/alight-test:bookworm-pytest] [--repeat 10] [--grade-repeat 3]
                              [--out bench/results/container.json]

The image: any image this machine's Python runs in (tests/container_support.py builds the tests' one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from agentlightning_cli.sandbox import SandboxSpec
from agentlightning_cli.tasks.shell import run_shell

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "container.json"
COMMANDS = {"true": "true", "python3 -c pass": "python3 -c pass"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", default="localhost/alight-test:bookworm-pytest")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--grade-repeat", type=int, default=3)
    ap.add_argument("--calls", type=int, default=300, help="proxy calls per client per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    times: dict[str, dict[str, list[float]]] = {c: {"bwrap": [], "container": []} for c in COMMANDS}
    with tempfile.TemporaryDirectory(prefix="alight-bench-container-") as tmp:
        ws = Path(tmp)
        specs = {"bwrap": SandboxSpec(writable=[ws]), "container": SandboxSpec(writable=[ws], image=args.image)}
        run_shell("true", ws, 120, sandbox=specs["container"])  # the runtime's flags and first start, not timed
        for _ in range(args.repeat):
            for name, command in COMMANDS.items():
                for mode, spec in specs.items():
                    t = time.perf_counter()
                    res = run_shell(command, ws, 120, sandbox=spec)
                    times[name][mode].append((time.perf_counter() - t) * 1000)
                    assert res.exit_code == 0, res
    rows = {name: {mode: round(statistics.median(v), 1) for mode, v in by.items()} for name, by in times.items()}
    print(f"{'command':18} {'bwrap ms':>9} {'container ms':>13} {'ratio':>6}")
    for name, row in rows.items():
        row["ratio"] = round(row["container"] / row["bwrap"], 1)
        print(f"{name:18} {row['bwrap']:>9} {row['container']:>13} {row['ratio']:>6}")
    calls = asyncio.run(proxy_calls(args.image, args.calls, args.rounds)) if args.calls > 0 else None
    grading = grading_seconds(args.grade_repeat) if args.grade_repeat > 0 else None
    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load": os.getloadavg()[0]},
              "image": args.image, "repeat": args.repeat, "median_ms": rows, "proxy_call": calls,
              "grading": grading}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


async def proxy_calls(image: str, calls: int, rounds: int) -> dict:
    """Median ms per proxy call from inside a container, inside bubblewrap and from the host, interleaved."""
    import sys

    sys.path.insert(0, str(ROOT))
    import importlib.util

    from agentlightning_cli.sandbox import Sandbox, SandboxSpec
    from agentlightning_cli.sandbox.bwrap import forwarder_python
    from agentlightning_cli.sandbox.container import ContainerSandbox
    from agentlightning_cli.testing.proxy_env import start_env, stop_env

    loaded = importlib.util.spec_from_file_location("bench_sandbox", ROOT / "bench" / "sandbox.py")
    bench_sandbox = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(bench_sandbox)
    work = Path(tempfile.mkdtemp(prefix="alight-bench-container-calls-"))
    env = await start_env(work)
    python, prefix = forwarder_python()
    client = work / "client.py"
    client.write_text(bench_sandbox.CLIENT)
    port = int(env.proxy.base_url.rsplit(":", 1)[1])
    episode, key = env.episode()
    argv = [python, "-I", str(client), str(port), f"/e/{episode}/v1/chat/completions", key, str(calls)]
    times: dict[str, list[float]] = {"container": [], "bwrap": [], "host": []}
    try:
        for _ in range(rounds):
            for kind in times:
                spec = SandboxSpec(writable=[work], read_only=[prefix], proxy_port=port,
                                   proxy_listeners=Path(env.proxy.listeners_path),
                                   image=image if kind == "container" else None)
                box = ContainerSandbox(spec) if kind == "container" else Sandbox(spec) if kind == "bwrap" else None
                command = box.command(argv, work) if box else [*argv, str(os.getpid())]
                proc = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE,
                                                            **(box.popen_kwargs() if box else {}))
                if box:
                    box.started(proc.pid)
                out = (await proc.communicate())[0]
                if box:
                    box.close()
                times[kind] += json.loads(out)["times"][0]
    finally:
        await stop_env(env)
    ms = {k: round(statistics.median(v) * 1000, 3) for k, v in times.items()}
    out = {"median_ms_per_call": ms, "added_ms_container": round(ms["container"] - ms["host"], 3),
           "added_ms_bwrap": round(ms["bwrap"] - ms["host"], 3), "calls": calls, "rounds": rounds}
    print(f"{'proxy call (median)':18} {'host ms':>9} {'bwrap ms':>9} {'container ms':>13}")
    print(f"{'':18} {ms['host']:>9} {ms['bwrap']:>9} {ms['container']:>13}")
    return out


def grading_seconds(repeat: int) -> dict:
    """Median seconds of the official grading of the tests' SWE-bench-format instance, per patch kind."""
    import sys

    sys.path.insert(0, str(ROOT))
    from agentlightning_cli.sandbox.container import runtime_path
    from agentlightning_cli.swebench_grade import grade
    from agentlightning_cli.tasks.load import load_tasks
    from tests.container_support import swebench_instance

    with tempfile.TemporaryDirectory(prefix="alight-bench-grade-") as tmp:
        row, image = swebench_instance(Path(tmp))
        (Path(tmp) / "swe.jsonl").write_text(json.dumps(row) + "\n")
        (task,) = load_tasks(Path(tmp) / "swe.jsonl")
        task = task.model_copy(update={"image": image})
        patches = {"gold": row["patch"].encode(), "no-fix": NO_FIX.encode()}
        runtime = runtime_path("auto")
        grade(task, patches["gold"], runtime=runtime, network=False)  # the runtime's flags probed, not timed
        times: dict[str, list[float]] = {k: [] for k in patches}
        verdicts: dict[str, bool] = {}
        for _ in range(repeat):
            for kind, patch in patches.items():
                result = grade(task, patch, runtime=runtime, network=False)
                assert result.detail.get("grading") == "official" and "resolved" in result.detail, result.detail
                times[kind].append(result.duration_s)
                verdicts[kind] = result.detail["resolved"]
    out = {kind: {"median_s": round(statistics.median(v), 2), "resolved": verdicts[kind]} for kind, v in times.items()}
    print(f"{'grading (official)':18} {'median s':>9} {'resolved':>9}")
    for kind, row in out.items():
        print(f"{kind:18} {row['median_s']:>9} {str(row['resolved']):>9}")
    return {"instance": "tests' acme__calc-42 (pytest, 4 tests)", "repeat": repeat, "network": False, **out}


# Applies to the instance's calc/__init__.py at its base commit and changes nothing the tests see.
NO_FIX = """diff --git a/calc/__init__.py b/calc/__init__.py
--- a/calc/__init__.py
+++ b/calc/__init__.py
@@ -1 +1,2 @@
+# looked at, not fixed
 def add(a, b):
"""


if __name__ == "__main__":
    main()
