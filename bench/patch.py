"""What keeping the agent's patch costs an episode (tasks/patch.py): the starting-point snapshot after setup and
the patch after the harness, on repositories the size of SWE-bench's (django has ~6,800 tracked files, sympy
~1,600, astropy ~2,000), beside `git status` in the same workspace as the yardstick every agent's own tooling pays.

Each size gets a committed repository of N files (~2 KB of text each, in folders of 50), one setup file, and a
small agent edit (two files changed, one added). Median of --repeat runs, run alternately per size.

    python bench/patch.py [--files 500 2000 7000] [--repeat 5] [--out bench/results/patch.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from agentlightning_cli.tasks.patch import agent_patch, snapshot_base

RESULTS = Path(__file__).resolve().parent / "results" / "patch.json"


def make_repo(root: Path, files: int) -> Path:
    repo = root / f"repo-{files}"
    for i in range(files):
        path = repo / f"pkg{i // 50}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}\n\n" for j in range(50)))
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    (repo / "setup_output.txt").write_text("written by setup\n")
    return repo


def one(repo: Path, work: Path) -> dict[str, float]:
    base = work / "base.git"
    t = time.perf_counter()
    snapshot_base(repo, base)
    snap = time.perf_counter() - t
    edited = [repo / "pkg0" / "mod0.py", repo / "pkg1" / "mod50.py"]
    before = [p.read_bytes() for p in edited]
    for p in edited:
        p.write_text(p.read_text() + "\n# fixed\n")
    (repo / "new_module.py").write_text("print('new')\n")
    t = time.perf_counter()
    made = agent_patch(repo, base)
    patch_s = time.perf_counter() - t
    assert made.error is None and made.files == 3, made
    t = time.perf_counter()
    subprocess.run(["git", "status", "--porcelain"], cwd=repo, check=True, capture_output=True)
    status_s = time.perf_counter() - t
    for p, content in zip(edited, before):
        p.write_bytes(content)
    (repo / "new_module.py").unlink()
    return {"snapshot_ms": snap * 1000, "patch_ms": patch_s * 1000, "git_status_ms": status_s * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, nargs="+", default=[500, 2000, 7000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="alight-bench-patch-") as tmp:
        repos = {n: make_repo(Path(tmp), n) for n in args.files}
        runs: dict[int, list[dict[str, float]]] = {n: [] for n in args.files}
        for r in range(args.repeat):
            for n in args.files:
                runs[n].append(one(repos[n], Path(tmp) / f"w{n}-{r}"))
    rows = {n: {k: round(statistics.median(x[k] for x in runs[n]), 1) for k in runs[n][0]} for n in args.files}
    print(f"{'files':>6} {'snapshot ms':>12} {'patch ms':>9} {'git status ms':>14}")
    for n, row in rows.items():
        print(f"{n:>6} {row['snapshot_ms']:>12} {row['patch_ms']:>9} {row['git_status_ms']:>14}")
    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load": os.getloadavg()[0]},
              "repeat": args.repeat, "sizes": {str(n): row for n, row in rows.items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
