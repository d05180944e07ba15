"""One benchmark, two revisions of alight, side by side in one run: "did this change leave X unchanged?"

Each revision is checked out into its own git worktree (HEAD's is the working tree itself); the benchmark is run
from each, alternating, `--repeat` times, with the same Python (this venv) and the worktree first on PYTHONPATH,
so each run imports and launches its own revision's code. After every run the benchmark's results JSON is read
from that checkout and restored to what git has there (a comparison must not rewrite the published numbers).
Prints, per metric, the median for each revision and their ratio; writes bench/results/revisions-<bench>.json.

    python bench/revisions.py proxy --before REV [--after HEAD] [--repeat 3] [-- ARGS FOR THE BENCH]
    python bench/revisions.py rollout --before REV -- --episodes 8 --concurrency 4

Metrics are the numeric leaves of the benchmark's JSON (dotted paths); --metric picks some (prefix match).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
RESULT_FILES = {"proxy": "proxy.json", "rollout": "rollout.json", "store": "store.json", "translate": "translate.json",
                "sandbox": "sandbox.json", "harness": "harness.json", "inspect_cli": "inspect.json"}


def checkout(rev: str, work: Path) -> Path:
    """The working tree for HEAD (what is being measured now), a detached worktree for any other revision."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    sha = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    if sha.strip() == head.strip():
        return ROOT
    path = work / sha.strip()[:12]
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", "-f", str(path), sha.strip()], cwd=ROOT, check=True,
                       capture_output=True)
    return path


def leaves(data, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(leaves(value, f"{prefix}{key}."))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out.update(leaves(value, f"{prefix}{i}."))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out[prefix[:-1]] = float(data)
    return out


def run_once(tree: Path, bench: str, args: list[str]) -> dict[str, float]:
    result = tree / "bench" / "results" / RESULT_FILES[bench]
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep)}
    try:
        proc = subprocess.run([sys.executable, str(tree / "bench" / f"{bench}.py"), *args], cwd=tree, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{bench} at {tree} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return leaves(json.loads(result.read_text()))
    finally:  # the published results stay as committed
        subprocess.run(["git", "checkout", "--", str(result.relative_to(tree))], cwd=tree, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench", choices=sorted(RESULT_FILES))
    parser.add_argument("--before", required=True, help="the revision to compare against (a commit, tag or branch)")
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--metric", action="append", default=[], help="dotted-path prefix of metrics to show")
    parser.add_argument("--work", type=Path, default=Path("/tmp/alight-bench-revisions"))
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    opts = parser.parse_args(argv[:split])
    opts.args = argv[split + 1:]  # the benchmark's own arguments
    trees = {"before": checkout(opts.before, opts.work), "after": checkout(opts.after, opts.work)}
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for i in range(opts.repeat):
        for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
            print(f"run {i + 1}/{opts.repeat}: {side} ({trees[side]})", flush=True)
            runs[side].append(run_once(trees[side], opts.bench, opts.args))
    common = sorted(set.intersection(*(set(r) for side in runs.values() for r in side)))
    shown = [m for m in common if not opts.metric or any(m.startswith(p) for p in opts.metric)]
    table = {}
    print(f"\n{'metric':60} {'before':>12} {'after':>12} {'after/before':>13}")
    for metric in shown:
        before = statistics.median(r[metric] for r in runs["before"])
        after = statistics.median(r[metric] for r in runs["after"])
        ratio = after / before if before else None
        table[metric] = {"before": before, "after": after, "ratio": ratio}
        print(f"{metric:60} {before:12.4g} {after:12.4g} {'' if ratio is None else f'{ratio:13.3f}'}")
    out = RESULTS / f"revisions-{opts.bench}.json"
    out.write_text(json.dumps({"bench": opts.bench, "before": opts.before, "after": opts.after, "repeat": opts.repeat,
                               "args": opts.args, "load_avg": os.getloadavg(), "medians": table}, indent=1) + "\n")
    print(f"\nmedians of {opts.repeat} alternating runs each; wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
