"""The learning proof: a real model (SmolLM2-135M-Instruct) through a real harness (mini-SWE-agent, text mode) on
CPU, trained with `alight run --rounds R` on examples/easy/train.jsonl and evaluated on the held-out tasks
(examples/easy/heldout.jsonl) with the base model (the round-0 adapter is zero) and with each arm's last adapter.

Two arms, the same in everything but the learning rate: `learn` (train.learning_rate as given) and `control`
(learning rate 0: rounds, rollouts, seeds and adapters as in `learn`, no weight change), so what sampling noise
and drift alone do to the held-out score is measured, not assumed. The held-out set is never trained on, and
nothing here is tuned on it.

Reports per arm: train reward per round, held-out pass@1 and mean reward before/after, time per round split into
rollout / training / swap, trainer tokens/s, clip fraction, importance-weight statistics, and why calls did not
merge into one row (prefix breaks per 100 calls by kind, on this real traffic); a table on stdout and
bench/results/learn.json.

    python bench/learn.py [--rounds 5] [--attempts 8] [--eval-attempts 8] [--concurrency 8] [--lr 5e-4]
                          [--epochs 2] [--batch-size 8] [--grad-accum 1] [--max-turns 1] [--temperature T]
                          [--tasks 8] [--heldout-tasks N] [--arms learn,control] [--control-rounds 0]
                          [--out FILE] [--report WORK_DIR]

The defaults are the configuration of bench/results/learn.json (~100 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "learn.json"
TRAIN = ROOT / "examples" / "easy" / "train.jsonl"
HELDOUT = ROOT / "examples" / "easy" / "heldout.jsonl"
HARNESS = "mini-swe-agent-text"


def alight(args: list[str], env: dict[str, str], log: Path) -> dict:
    """One `alight ... --json` as a user runs it; its JSON summary (stderr kept in `log`)."""
    started = time.perf_counter()
    with open(log, "w") as err:
        out = subprocess.run([sys.executable, "-m", "agentlightning_cli", *args, "--json"], env=env, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=err, text=True)
    if out.returncode != 0:
        raise SystemExit(f"alight {' '.join(args)} failed (exit {out.returncode}); see {log}")
    summary = json.loads(out.stdout)
    summary["_seconds"] = time.perf_counter() - started
    return summary


def task_ids(path: Path, limit: int | None) -> list[str]:
    ids = [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]
    return ids[:limit] if limit else ids


def held_out(summary: dict) -> dict:
    tasks = summary["tasks"]
    p1 = [t["pass_at_1"] for t in tasks if t["pass_at_1"] is not None]
    mr = [t["mean_reward"] for t in tasks if t["mean_reward"] is not None]
    return {"pass_at_1": round(sum(p1) / len(p1), 4) if p1 else None,
            "mean_reward": round(sum(mr) / len(mr), 4) if mr else None, "seconds": round(summary["_seconds"], 1),
            # Where a change comes from: one task learned, or a little everywhere.
            "per_task": {t["task_id"]: {"solved": t["solved"], "attempts": t["attempts"],
                                        "mean_reward": t["mean_reward"]} for t in tasks}}


def heldout_from_store(run_dir: Path) -> dict:
    """held_out() for a held-out run read back from its store (a run whose summary was not kept: --report)."""
    from agentlightning_cli.rollout.round import final_episodes
    from agentlightning_cli.rollout.summary import summarize
    from agentlightning_cli.store import Store

    store = Store.open(run_dir)
    try:
        run = store.list_runs()[0]
        rnd = store.list_rounds(run.id)[-1]
        episodes = final_episodes(store, run.id, rnd.id)
        summary = summarize(run.name, rnd.index, 1, episodes).to_json()
        ends, starts = [e.ended_at for e in episodes if e.ended_at], [e.started_at for e in episodes if e.started_at]
        summary["_seconds"] = (max(ends) - min(starts)) if ends and starts else 0.0
    finally:
        store.close()
    return {**held_out(summary), "episodes": len(episodes)}


def report(work: Path) -> dict:
    """The results of a work folder's runs, read from their stores: what an interrupted benchmark got to."""
    runs = work / "runs"
    results: dict = {"work_dir": str(work), "rebuilt_from_stores": True, "arms": {}}
    if (runs / "heldout-base" / "alight.db").is_file():
        results["heldout_base"] = heldout_from_store(runs / "heldout-base")
    trained = {p.name.split("-", 1)[1] for p in runs.glob("train-*")}
    evaluated = {p.name.split("-", 1)[1] for p in runs.glob("heldout-*")} - {"base"}
    arms = sorted(trained | evaluated)
    for arm in arms:
        train = runs / f"train-{arm}"
        entry: dict = {}
        if (train / "alight.db").is_file():
            entry.update(rounds=round_stats(train), breaks=break_stats(train))
        if (runs / f"heldout-{arm}" / "alight.db").is_file():
            entry["heldout_after"] = heldout_from_store(runs / f"heldout-{arm}")
            if "heldout_base" in results:
                entry["heldout_change_pass_at_1"] = _delta(entry["heldout_after"], results["heldout_base"])
        results["arms"][arm] = entry
    return results


def round_stats(run_dir: Path) -> list[dict]:
    """Per round, from the run's store: train reward, rollout seconds, and the training that followed it."""
    from agentlightning_cli.store import Store

    store = Store.open(run_dir)
    try:
        run = store.list_runs()[0]
        out = []
        rounds = store.list_rounds(run.id)
        for position, rnd in enumerate(rounds):
            eps = [e for e in store.list_episodes(run_id=run.id, round_id=rnd.id) if e.status == "done"]
            rewards = [e.reward for e in eps if e.reward is not None]
            starts = [e.started_at for e in eps if e.started_at]
            ends = [e.ended_at for e in eps if e.ended_at]
            entry = {"round": rnd.index, "episodes": len(eps),
                     "train_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
                     "solved": sum(1 for r in rewards if r >= 1.0),
                     "rollout_s": round(max(ends) - min(starts), 1) if starts and ends else None}
            trained = store.get_train_round(run.id, rnd.index)
            if trained is not None:
                steps = store.list_train_steps(run.id, rnd.index)
                detail = trained.detail or {}
                tps = [s.tokens_per_s for s in steps if s.tokens_per_s]
                clip = [s.clip_fraction for s in steps if s.clip_fraction is not None]
                entry.update({"training_s": round(trained.seconds, 1), "rows": trained.rows, "steps": trained.steps,
                              "tokens_per_s": round(sum(tps) / len(tps), 1) if tps else None,
                              "clip_fraction_mean": round(sum(clip) / len(clip), 4) if clip else None,
                              "clip_fraction_max": round(max(clip), 4) if clip else None,
                              "importance": detail.get("importance"), "dropped": trained.dropped})
            if position + 1 < len(rounds) and ends:
                # From the round's last episode to the next round's start: drain + training + adapter swap.
                transition = rounds[position + 1].started_at - max(ends)
                entry["transition_s"] = round(transition, 1)
                if "training_s" in entry:
                    entry["swap_s"] = round(transition - entry["training_s"], 1)
            out.append(entry)
        return out
    finally:
        store.close()


def break_stats(run_dir: Path, merge: str = "strict") -> dict:
    """Why consecutive calls did not merge into one row, per 100 calls, by kind (`retokenised`, `template`,
    `edited`, `other`), over every episode of the run: the trainer's own row builder on the recorded traffic."""
    from transformers import AutoTokenizer

    from agentlightning_cli.run_snapshot import served_model
    from agentlightning_cli.store import Store
    from agentlightning_cli.train.round_step import collect_rows, row_context

    store = Store.open(run_dir)
    try:
        run = store.list_runs()[0]
        tokenizer = AutoTokenizer.from_pretrained(served_model(run.config), local_files_only=True)
        episodes = [e.id for e in store.list_episodes(run_id=run.id)]
        report = collect_rows(store, episodes, row_context(tokenizer, None), merge)
        calls = sum(len(store.get_calls(e)) for e in episodes)
    finally:
        store.close()
    return {"merge": merge, "episodes": len(episodes), "calls": calls, "rows": len(report.rows),
            "breaks": dict(report.breaks),
            "breaks_per_100_calls": {k: round(100 * v / calls, 1) for k, v in report.breaks.items()} if calls else {},
            "dropped": dict(report.dropped)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--attempts", type=int, default=8, help="attempts per train task (the GRPO group size)")
    ap.add_argument("--eval-attempts", type=int, default=8, help="attempts per held-out task")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--lr", type=float, default=5e-4, help="train.learning_rate of the learn arm")
    ap.add_argument("--epochs", type=int, default=2, help="train.epochs")
    ap.add_argument("--batch-size", type=int, default=8, help="train.batch_size")
    ap.add_argument("--grad-accum", type=int, default=1, help="train.grad_accum")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=None,
                    help="the policy's sampling temperature for every run of both arms and the held-out evaluations "
                         "(proxy.sampling.temperature; default: the recipe's 0.7)")
    ap.add_argument("--max-turns", type=int, default=1,
                    help="the harness's turn limit for every run (`alight run --max-turns`): 1, one command per "
                         "episode, scored as it left the workspace; 0, the recipe's own limit (3)")
    ap.add_argument("--tasks", type=int, default=8, help="the first N train tasks (0: all 16)")
    ap.add_argument("--heldout-tasks", type=int, default=None, help="only the first N held-out tasks")
    ap.add_argument("--arms", default="learn,control")
    ap.add_argument("--control-rounds", type=int, default=0,
                    help="rounds of the control arm. Its learning rate is 0, so its adapter never changes: 0 (the "
                         "default) runs only its held-out evaluation, a second draw of the base model; N runs its "
                         "rounds too, to show the train reward's drift per round")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--report", type=Path, default=None, metavar="WORK_DIR",
                    help="rebuild the results from an earlier (possibly interrupted) run's work folder and stop")
    args = ap.parse_args()
    if args.report is not None:
        results = report(args.report)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        render(results)
        return

    work = Path(tempfile.mkdtemp(prefix="alight-learn-"))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("ALIGHT_")}
    base_env.update({"ALIGHT_RUNS_DIR": str(work / "runs"), "PYTHONPATH": str(ROOT)})
    if os.environ.get("ALIGHT_HOME"):
        base_env["ALIGHT_HOME"] = os.environ["ALIGHT_HOME"]
    if args.temperature is not None:
        base_env["ALIGHT_PROXY__SAMPLING__TEMPERATURE"] = str(args.temperature)
    common = ["--harness", HARNESS, "--model", "smollm2", "--seed", str(args.seed), "--concurrency",
              str(args.concurrency)]
    if args.max_turns:
        common += ["--max-turns", str(args.max_turns)]
    train_ids = ",".join(task_ids(TRAIN, args.tasks))
    heldout_ids = ",".join(task_ids(HELDOUT, args.heldout_tasks))
    results: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                 "load_at_start": os.getloadavg()[0]},
                     "config": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                                "harness": HARNESS, "model": "smollm2", "train_tasks": train_ids.split(","),
                                "heldout_tasks": heldout_ids.split(",")},
                     "arms": {}}
    started = time.perf_counter()
    print(f"[learn] held-out with the base model ({args.eval_attempts} attempts per task)", file=sys.stderr)
    base = alight(["run", "--task-set", str(HELDOUT), "--tasks", heldout_ids, "--attempts", str(args.eval_attempts),
                   "--name", "heldout-base", *common], base_env, work / "heldout-base.log")
    results["heldout_base"] = held_out(base)
    for arm in args.arms.split(","):
        env = dict(base_env, ALIGHT_TRAIN__LEARNING_RATE=str(args.lr if arm == "learn" else 0.0))
        for name in ("epochs", "batch_size", "grad_accum"):
            if getattr(args, name) is not None:
                env[f"ALIGHT_TRAIN__{name.upper()}"] = str(getattr(args, name))
        rounds_here = args.rounds if arm == "learn" else args.control_rounds
        entry: dict = {}
        eval_env = dict(base_env)
        if rounds_here > 0:
            print(f"[learn] arm {arm}: {rounds_here} rounds on {len(train_ids.split(','))} tasks", file=sys.stderr)
            train = alight(["run", "--task-set", str(TRAIN), "--tasks", train_ids, "--attempts", str(args.attempts),
                            "--rounds", str(rounds_here), "--name", f"train-{arm}", *common], env,
                           work / f"train-{arm}.log")
            run_dir = work / "runs" / f"train-{arm}"
            # The adapter the last round was served with (a round with nothing to train keeps the one before).
            last = max((d for d in (run_dir / "adapters").glob("round-*") if (d / "adapter_config.json").is_file()),
                       key=lambda d: int(d.name.split("-")[1]))
            eval_env["ALIGHT_SERVE__ADAPTER"] = str(last)
            entry.update(train_seconds=round(train["_seconds"], 1), rounds=round_stats(run_dir),
                         breaks=break_stats(run_dir))
            print(f"[learn] arm {arm}: held-out with {last.name}", file=sys.stderr)
        else:  # learning rate 0 leaves the zero adapter as it is: the held-out after is a second draw of the base
            print(f"[learn] arm {arm}: held-out again with the zero adapter (no rounds)", file=sys.stderr)
        after = alight(["run", "--task-set", str(HELDOUT), "--tasks", heldout_ids, "--attempts",
                        str(args.eval_attempts), "--name", f"heldout-{arm}", *common], eval_env,
                       work / f"heldout-{arm}.log")
        entry.update(heldout_after=held_out(after),
                     heldout_change_pass_at_1=_delta(held_out(after), results["heldout_base"]))
        results["arms"][arm] = entry
    results["seconds"] = round(time.perf_counter() - started, 1)
    results["work_dir"] = str(work)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    render(results)


def _delta(after: dict, before: dict) -> float | None:
    if after["pass_at_1"] is None or before["pass_at_1"] is None:
        return None
    return round(after["pass_at_1"] - before["pass_at_1"], 4)


def render(results: dict) -> None:
    base = results.get("heldout_base")
    if base:
        print(f"held-out, base model: pass@1 {base['pass_at_1']}  mean reward {base['mean_reward']}")
    print(f"{'arm':8} {'round':>5} {'train reward':>12} {'solved':>6} {'rollout s':>9} {'train s':>8} "
          f"{'swap s':>6} {'tok/s':>7} {'clip':>6} {'rho mean':>8}")
    for arm, data in results["arms"].items():
        for r in data.get("rounds", []):
            rho = (r.get("importance") or {}).get("mean")
            print(f"{arm:8} {r['round']:>5} {_f(r['train_reward']):>12} {r['solved']:>6} {_f(r['rollout_s']):>9} "
                  f"{_f(r.get('training_s')):>8} {_f(r.get('swap_s')):>6} {_f(r.get('tokens_per_s')):>7} "
                  f"{_f(r.get('clip_fraction_mean')):>6} {_f(rho):>8}")
        b = data.get("breaks")
        if b:
            print(f"{arm:8} prefix breaks per 100 calls ({b['calls']} calls, {b['rows']} rows): "
                  f"{b['breaks_per_100_calls'] or 'none'}")
        after = data.get("heldout_after")
        if after:
            print(f"{arm:8} held-out after: pass@1 {after['pass_at_1']} (change "
                  f"{data.get('heldout_change_pass_at_1')}), mean reward {after['mean_reward']}")
            if base and "per_task" in after and "per_task" in base:
                print(f"{arm:8} held-out solved per task, base -> after: " + ", ".join(
                    f"{task} {base['per_task'].get(task, {}).get('solved', '-')}->{t['solved']}/{t['attempts']}"
                    for task, t in after["per_task"].items()))
    if "seconds" in results:
        print(f"total {results['seconds']} s")


def _f(value) -> str:
    return "-" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value))


if __name__ == "__main__":
    main()
