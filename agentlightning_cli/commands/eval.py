"""`alight eval`: a task set x attempts under one adapter (or the base), or two compared paired; no training.

Each adapter is an ordinary one-round `alight run` (commands/run.py, the one way through an episode) into its own
run folder under the evaluation's folder (`0-base/`, `1-round-3/`), serving that adapter as round 0's policy
(serve.adapter; the base through the zero adapter, as round 0 always is). Separate runs, not one run with a round
per adapter: a round after round 0 exists only after training, and a folder per arm keeps resume exactly what it
is for `alight run` — the same command again redoes only unfinished episodes, and an arm that finished starts
nothing. The cost is one vLLM start per arm.

Pairing: every arm runs seeded (`--seed`, default 0) with the seed of each call hashed from the (task, attempt)
slot and the call index instead of the episode id (which holds the run's random id), so the same slot draws with
the same seeds under both adapters. Intervals: rollout/intervals.py (tasks resampled, never attempts).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlightning_cli.commands.run_checks import RunOptions
from agentlightning_cli.errors import AlightError
from agentlightning_cli.rollout import intervals
from agentlightning_cli.rollout.heldout import METRICS, per_task
from agentlightning_cli.rollout.summary import SOLVED

BASE = "base"
"""`--adapter base`: the base model, served through the zero adapter (a folder named base: `./base`)."""


@dataclass
class Arm:
    label: str
    adapter: Path | None
    run_dir: Path
    per_task: dict[str, dict[str, Any]] = field(default_factory=dict)
    outcomes: dict[tuple[str, int], bool] = field(default_factory=dict)
    """(task, attempt) -> solved: what pairing compares slot by slot."""
    unscored: int = 0


def arm_labels(adapters: list[str]) -> list[tuple[str, Path | None]]:
    """`--adapter` values -> (folder label, adapter folder or None for the base), in the order given."""
    if not adapters:
        adapters = [BASE]
    if len(adapters) > 2:
        raise AlightError(f"alight eval takes one or two --adapter, got {len(adapters)}",
                          "compare two at a time (`--adapter base --adapter DIR` for base against one)")
    arms = []
    for i, given in enumerate(adapters):
        if given == BASE:
            arms.append((f"{i}-{BASE}", None))
        else:
            path = Path(given).expanduser().resolve()
            arms.append((f"{i}-{path.name}", path))
    return arms


def check_bases(settings: Any, opts: RunOptions, adapters: list[Path]) -> None:
    """Every adapter against the model that will be served, before any arm starts."""
    from agentlightning_cli.serve.given_adapter import check_adapter_base

    if not adapters:
        return
    if opts.upstream is not None:
        from agentlightning_cli.commands.run_upstream import probe_upstreams

        served, flag = probe_upstreams(opts.upstream, api_key=settings.serve.api_key).model, "an --upstream serving"
    else:
        from agentlightning_cli.serve.policy import resolve_model

        served, flag = resolve_model(settings, opts.model), "--model"
    for adapter in adapters:
        check_adapter_base(adapter, served, model_flag=flag)


def evaluate(opts: RunOptions, adapters: list[str], resamples: int = intervals.RESAMPLES) -> dict[str, Any]:
    from agentlightning_cli.commands.run import run
    from agentlightning_cli.config import load_settings

    if opts.rounds != 1:
        raise AlightError("alight eval runs one round per adapter; it never trains")
    if resamples < 100:
        raise AlightError(f"--resamples must be at least 100, got {resamples}")
    arms_given = arm_labels(adapters)
    settings = load_settings(flags={"sandbox": opts.sandbox})
    check_bases(settings, opts, [a for _, a in arms_given if a is not None])
    if opts.out is not None:
        folder = Path(opts.out).absolute()
    else:
        harness = Path(opts.harness).stem if opts.harness.endswith((".yaml", ".yml")) else opts.harness
        folder = (Path(settings.runs_dir) / (opts.name or f"eval-{Path(opts.task_set).stem}-{harness}")).absolute()
    seed = 0 if opts.seed is None else opts.seed
    arms, task_order, notes = [], None, []
    for label, adapter in arms_given:
        print(f"alight eval: {label} ({adapter or 'the base model, through the zero adapter'}) -> {folder / label}",
              file=sys.stderr, flush=True)
        arm_settings = load_settings(flags={"sandbox": opts.sandbox})
        arm_settings.serve.adapter = adapter
        arm_settings.eval.task_set = None  # eval.* (a held-out set inside `alight run --rounds`) is not this command's
        arm_opts = dataclasses.replace(opts, out=folder / label, name=None, seed=seed, paired_seeds=True, rounds=1,
                                       adapter=adapter)
        summary = run(arm_settings, arm_opts)
        task_order = [t.task_id for t in summary.tasks]
        arms.append(read_arm(label, adapter, folder / label, opts.attempts))
        notes += [n for n in summary.notes if n not in notes]  # the run's own (upstream, sandbox, grading)
    result = report(arms, task_order or [], opts, seed, resamples)
    result["notes"] += notes
    return result


def read_arm(label: str, adapter: Path | None, run_dir: Path, k: int) -> Arm:
    """An arm's final episodes of round 0, per task; an episode without a reward counts as 0, not solved."""
    from agentlightning_cli.rollout.round import final_episodes
    from agentlightning_cli.store import Store

    arm = Arm(label, adapter, run_dir)
    store = Store.open(run_dir)
    try:
        row = store.get_run(run_dir.name)
        rnd = next(r for r in store.list_rounds(row.id) if r.index == 0)
        episodes = final_episodes(store, row.id, rnd.id)
    finally:
        store.close()
    for ep in episodes:
        arm.outcomes[(ep.task_id, ep.attempt)] = ep.reward is not None and ep.reward >= SOLVED
        arm.unscored += ep.reward is None
    arm.per_task = per_task(episodes, k)  # the same per-task shape as the held-out curve of `alight run`
    return arm


def report(arms: list[Arm], order: list[str], opts: RunOptions, seed: int, resamples: int) -> dict[str, Any]:
    tasks = [t for t in order if all(t in a.per_task for a in arms)]
    out: dict[str, Any] = {
        "task_set": str(Path(opts.task_set).absolute()), "harness": opts.harness, "attempts": opts.attempts,
        "k": opts.attempts, "tasks": len(tasks), "seed": seed,
        "bootstrap": {"unit": "task", "resamples": resamples, "seed": intervals.SEED, "level": intervals.LEVEL,
                      "method": "percentile; tasks resampled with replacement, each keeping all its attempts"},
        "arms": [], "difference": None, "notes": []}
    for arm in arms:
        entry = {"label": arm.label, "adapter": str(arm.adapter) if arm.adapter else BASE, "run_dir": str(arm.run_dir),
                 "episodes": sum(a["attempts"] for t, a in arm.per_task.items() if t in tasks), "unscored": arm.unscored}
        for metric in METRICS:
            ci = intervals.task_interval([arm.per_task[t][metric] for t in tasks], resamples)
            entry[metric] = ci.to_json() if ci else None
        entry["per_task"] = [arm.per_task[t] for t in tasks]
        out["arms"].append(entry)
        if arm.unscored:
            out["notes"].append(f"{arm.label}: {arm.unscored} episode(s) ended without a reward (setup or reward "
                                "failed); counted as reward 0, not solved")
    if len(arms) == 2:
        first, second = arms
        diff: dict[str, Any] = {"of": f"{second.label} - {first.label}"}
        for metric in METRICS:
            ci = intervals.paired_interval([first.per_task[t][metric] for t in tasks],
                                           [second.per_task[t][metric] for t in tasks], resamples)
            diff[metric] = ci.to_json() if ci else None
        pairs = [s for s in first.outcomes if s in second.outcomes and s[0] in tasks]
        diff["pairs"] = len(pairs)
        diff["same_outcome"] = (sum(first.outcomes[s] == second.outcomes[s] for s in pairs) / len(pairs)) if pairs else None
        out["difference"] = diff
    return out


def render(result: dict[str, Any]) -> str:
    boot = result["bootstrap"]
    lines = [f"alight eval: {result['tasks']} task(s) x {result['attempts']} attempt(s), seed {result['seed']}; "
             f"95% intervals clustered by task ({boot['resamples']} bootstrap resamples of tasks, seed {boot['seed']})"]

    def row(name: str, values: dict[str, Any]) -> str:
        cells = [f"{m.replace('_at_', '@')} " + (intervals.Interval(**values[m]).text() if values[m] else "-")
                 for m in METRICS]
        return f"  {name:<24} " + "   ".join(cells)

    for arm in result["arms"]:
        lines.append(row(arm["label"], arm) + f"   ({arm['episodes']} episodes, {arm['run_dir']})")
    diff = result["difference"]
    if diff:
        lines.append(row(diff["of"], diff) + f"   (paired: {diff['pairs']} (task, attempt) draws, "
                     f"{(diff['same_outcome'] or 0):.0%} with the same outcome)")
    lines += [f"  note: {n}" for n in result["notes"]]
    return "\n".join(lines)


def eval_and_report(opts: RunOptions, adapters: list[str], resamples: int, as_json: bool) -> None:
    import json

    result = evaluate(opts, adapters, resamples)
    print(json.dumps(result, indent=2) if as_json else render(result))
