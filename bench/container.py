"""What `sandbox: container` costs a command against bubblewrap: one shell command (`true`, and a Python start)
run through the task shell (tasks/shell.run_shell) in each sandbox, alternating, median wall ms of --repeat runs.
An episode pays it three times (setup, harness, reward); a proxy call pays nothing extra in either (the
sandbox's loopback listener is handed to the proxy).

    python bench/container.py [--image localhost/alight-test:bookworm-pytest] [--repeat 10] [--out bench/results/container.json]

The image: any image this machine's Python runs in (tests/container_support.py builds the tests' one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from agentlightning_cli.sandbox import SandboxSpec
from agentlightning_cli.tasks.shell import run_shell

RESULTS = Path(__file__).resolve().parent / "results" / "container.json"
COMMANDS = {"true": "true", "python3 -c pass": "python3 -c pass"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", default="localhost/alight-test:bookworm-pytest")
    ap.add_argument("--repeat", type=int, default=10)
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
    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load": os.getloadavg()[0]},
              "image": args.image, "repeat": args.repeat, "median_ms": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
