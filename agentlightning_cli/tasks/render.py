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
    if s["harbor"]:
        lines += ["  harbor tasks (agent network is always the proxy only; the verifier's is what the task asks for):"]
        lines += [_harbor_line(row) for row in s["harbor"]]
        missing = [row["id"] for row in s["harbor"] if not row["solution"]]
        if missing:
            lines.append(f"  without solution/solve.sh (the oracle cannot check them): {', '.join(missing)}")
    sys.stdout.write("\n".join(lines) + "\n")


def _harbor_line(row: dict) -> str:
    limits = ", ".join(f"{k} {row[k]:g}" for k in ("cpus", "memory_mb", "storage_mb") if row[k] is not None)
    times = f"agent {row['agent_timeout_s']:g}s" if row["agent_timeout_s"] else "agent (harness default)"
    return (f"    {row['id']}: {row['environment']}; network asked: agent {row['agent_network']}, verifier "
            f"{row['verifier_network']}; {times}, verifier {row['verifier_timeout_s']:g}s"
            + (f"; {limits}" if limits else "") + (f"; workdir {row['workdir']}" if row["workdir"] else ""))


def print_oracle(report: TaskSetReport, rows: list) -> None:
    """`--oracle`: each task's score from its own solution (1 means environment and verifier work)."""
    lines = ["oracle (solution/solve.sh, then tests/test.sh in the same container):"]
    for row in rows:
        if row.error is not None:
            lines.append(f"  {row.task_id}: reward_error: {row.error}")
            if row.log.strip():
                lines += [f"      {line}" for line in row.log.strip().splitlines()[-10:]]
        else:
            extra = {k: v for k, v in row.detail["rewards"].items() if k != row.detail["key"]}
            more = "".join(f", {k} {v:g}" for k, v in extra.items())
            lines.append(f"  {row.task_id}: reward {row.reward:g} ({row.detail['source']}{more})")
        lines += [f"      note: {note}" for note in row.notes or []]
    unsolved = [t.id for t in report.tasks if t.harbor is not None and t.harbor.solution_dir is None]
    if unsolved:
        lines.append(f"  no solution/solve.sh, not checked: {', '.join(unsolved)}")
    sys.stdout.write("\n".join(lines) + "\n")
