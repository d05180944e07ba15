"""Human output of `alight tasks check`: summary on stdout, problems and warnings on stderr."""

from __future__ import annotations

import sys

from agentlightning_cli.tasks.load import TaskSetReport


def print_report(report: TaskSetReport) -> None:
    for w in report.warnings:
        sys.stderr.write(f"warning: {w}\n")
    for p in report.problems:
        sys.stderr.write(f"error: {p}\n")
    s = report.summary()
    fmt = lambda counts: ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"  # noqa: E731
    n = len(report.problems)
    status = "ok" if report.ok else f"INVALID ({n} problem{'s' if n != 1 else ''})"
    lines = [
        f"{report.file}: {status}",
        f"  tasks:        {len(report.tasks)}" + ("" if report.ok else " valid"),
        f"  kinds:        {fmt(s['kinds'])}",
        f"  repos:        {len(s['repos'])} distinct ({fmt(s['repo_kinds'])})",
        f"  hidden files: with {s['hidden_files']['with']}, without {s['hidden_files']['without']}",
        f"  rewards:      {fmt(s['reward_kinds'])}",
        f"  with setup:   {s['with_setup']}",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
