"""The learning benchmark: does training with alight make a real model better on tasks it never trains on?

A thin driver over the product. Each invocation is one `alight run` of one arm at one seed — SmolLM2-135M-Instruct
through mini-SWE-agent (text mode) on CPU, trained for --rounds rounds on examples/easy/train.jsonl, with the
held-out set examples/easy/heldout.jsonl (never trained on; no task a train task with other names) evaluated
inside the run before round 0 (the base model through the zero adapter) and after the last training:

    alight run --task-set examples/easy/train.jsonl --tasks <first N> --harness mini-swe-agent-text --model smollm2
               --attempts 8 --rounds 5 --max-turns 1 --seed S --eval-task-set examples/easy/heldout.jsonl
               --eval-attempts 4 --eval-every 4 --json

with the training settings in an alight.yaml of the run's work folder (train.learning_rate, epochs, batch_size,
grad_accum, seed = S, reward_control), exactly as a user sets them. Arms, the same in everything else:
- `learn`: train.reward_control none, the real reward;
- `shuffled`: train.reward_control shuffle — each group's rewards permuted across its episodes before advantages
  (same learning rate, same rows, same steps): what training gains on held-out tasks without a reward signal.
Every evaluation draws each (task, attempt) with the same sampling seeds (from --seed), so a run's round-0 and
last evaluations are paired and a learning-rate-0 arm would add nothing.

Per seed and arm the script stores every evaluation (per task: attempts, solved, pass@1, pass@k, mean reward) and
the train rounds (reward, timing, the reward control as each training applied it), and computes the held-out change
(last evaluation - round 0) with its 95% interval clustered by task (a paired bootstrap over tasks), the mean over
seeds per arm, and, per seed run in both arms, learn - shuffled on the last evaluation. The JSON
(bench/results/learn.json) is written only by this script: runs merge into it one at a time (a lock file), a run
of another configuration is refused, and free text goes in with --note.

    python bench/learn.py --seed 0                    # the learn arm, seed 0 (~62 minutes alone on 2 cores)
    python bench/learn.py --seed 0 --arm shuffled     # the control
    python bench/learn.py --summary                   # recompute (and store) the summary of the stored runs
    python bench/learn.py --smoke --out /tmp/l.json   # the driver end to end in minutes: tiny model, 2+2 tasks

Options: [--rounds 5] [--attempts 8] [--eval-attempts 4] [--concurrency 8] [--lr 5e-4] [--epochs 2]
[--batch-size 8] [--grad-accum 1] [--max-turns 1] [--temperature T] [--tasks 8] [--heldout-tasks N]
[--work DIR] [--replace] [--note TEXT] [--out FILE]. The defaults are the configuration of the earlier benchmark
(bench/results/learn-2026-11.json) with the held-out set grown to 26 tasks x 4 attempts. Nothing here is tuned
on the held-out set.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the product's own interval code, from this checkout

from agentlightning_cli.rollout.intervals import paired_interval  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "learn.json"
TRAIN = ROOT / "examples" / "easy" / "train.jsonl"
HELDOUT = ROOT / "examples" / "easy" / "heldout.jsonl"
HARNESS = "mini-swe-agent-text"
ARMS = {"learn": "none", "shuffled": "shuffle"}  # arm -> train.reward_control
METRICS = ("pass_at_1", "mean_reward")  # the changes reported (pass@k is stored per evaluation)
DEFAULTS = {"rounds": 5, "attempts": 8, "eval_attempts": 4, "concurrency": 8, "lr": 5e-4, "epochs": 2,
            "batch_size": 8, "grad_accum": 1, "max_turns": 1, "temperature": None, "tasks": 8, "heldout_tasks": None,
            "model": "smollm2"}
# --smoke: the driver end to end in minutes (the embedded tiny model says nothing about learning).
SMOKE = {"rounds": 2, "attempts": 2, "eval_attempts": 1, "concurrency": 2, "epochs": 1, "batch_size": 2,
         "tasks": 2, "heldout_tasks": 2, "model": "tiny"}


# ---- the configuration and the run ------------------------------------------------------------------------------

def task_ids(path: Path, limit: int | None) -> list[str]:
    ids = [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]
    return ids[:limit] if limit else ids


def configuration(opts: dict[str, Any]) -> dict[str, Any]:
    """What every run merged into one results file shares (all but the arm and the seed)."""
    rounds = opts["rounds"]
    return {"harness": HARNESS, "model": opts["model"], "rounds": rounds, "trainings": rounds - 1,
            "attempts": opts["attempts"], "eval_attempts": opts["eval_attempts"],
            # Round 0 and after the last training only: one evaluation between costs as much as a round.
            "eval_every": max(rounds - 1, 1), "concurrency": opts["concurrency"], "max_turns": opts["max_turns"],
            "temperature": opts["temperature"], "learning_rate": opts["lr"], "epochs": opts["epochs"],
            "batch_size": opts["batch_size"], "grad_accum": opts["grad_accum"],
            "train_tasks": task_ids(TRAIN, opts["tasks"]), "heldout_tasks": task_ids(HELDOUT, opts["heldout_tasks"])}


def settings_file(config: dict[str, Any], arm: str, seed: int) -> dict[str, Any]:
    """The run's alight.yaml: the training settings a user would write, the arm's reward control, the seed."""
    out: dict[str, Any] = {"train": {"learning_rate": config["learning_rate"], "epochs": config["epochs"],
                                     "batch_size": config["batch_size"], "grad_accum": config["grad_accum"],
                                     "seed": seed, "reward_control": ARMS[arm]}}
    if config["temperature"] is not None:
        out["proxy"] = {"sampling": {"temperature": config["temperature"]}}
    return out


def command(config: dict[str, Any], seed: int, run_dir: Path, heldout: Path) -> list[str]:
    cmd = ["run", "--task-set", str(TRAIN), "--tasks", ",".join(config["train_tasks"]), "--harness", HARNESS,
           "--model", config["model"], "--attempts", str(config["attempts"]), "--concurrency",
           str(config["concurrency"]), "--rounds", str(config["rounds"]), "--seed", str(seed),
           "--eval-task-set", str(heldout), "--eval-attempts", str(config["eval_attempts"]),
           "--eval-every", str(config["eval_every"]), "--out", str(run_dir), "--json"]
    if config["max_turns"]:
        cmd += ["--max-turns", str(config["max_turns"])]
    return cmd


def heldout_file(config: dict[str, Any], work: Path) -> Path:
    """examples/easy/heldout.jsonl, or (--heldout-tasks N) its first N lines beside a link to its hidden files."""
    if config["heldout_tasks"] == task_ids(HELDOUT, None):
        return HELDOUT
    wanted = set(config["heldout_tasks"])
    lines = [line for line in HELDOUT.read_text().splitlines() if line.strip() and json.loads(line)["id"] in wanted]
    path = work / "heldout.jsonl"
    path.write_text("\n".join(lines) + "\n")
    hidden = work / "hidden"
    if not hidden.exists():
        hidden.symlink_to(HELDOUT.parent / "hidden")
    return path


def run_alight(args: list[str], work: Path, log: Path) -> dict[str, Any]:
    """`alight ARGS` as a user runs it, in the work folder (its alight.yaml): the JSON summary (stderr in `log`).
    ALIGHT_* settings of the calling shell are left out (they would override the file); ALIGHT_HOME (the model
    and harness caches) is kept. The user settings file is not read either (XDG_CONFIG_HOME is the work folder)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALIGHT_")}
    if os.environ.get("ALIGHT_HOME"):
        env["ALIGHT_HOME"] = os.environ["ALIGHT_HOME"]
    env.update(XDG_CONFIG_HOME=str(work / "user-config"), PYTHONPATH=str(ROOT))
    with open(log, "a") as err:
        out = subprocess.run([sys.executable, "-m", "agentlightning_cli", *args], env=env, cwd=work,
                             stdout=subprocess.PIPE, stderr=err, text=True)
    if out.returncode != 0:
        raise SystemExit(f"alight {' '.join(args)} failed (exit {out.returncode}); see {log}. Run the same command "
                         "again to resume the run where it stopped.")
    return json.loads(out.stdout)


def round_stats(run_dir: Path) -> list[dict[str, Any]]:
    """Per training round, from the run's store: train reward, rollout seconds, and the training that followed it
    (with the reward control as it applied it)."""
    from agentlightning_cli.store import Store

    store = Store.open(run_dir)
    try:
        run = store.list_runs()[0]
        out = []
        for rnd in store.list_rounds(run.id):
            eps = [e for e in store.list_episodes(run_id=run.id, round_id=rnd.id) if e.status == "done"]
            rewards = [e.reward for e in eps if e.reward is not None]
            starts, ends = [e.started_at for e in eps if e.started_at], [e.ended_at for e in eps if e.ended_at]
            entry: dict[str, Any] = {
                "round": rnd.index, "episodes": len(eps), "solved": sum(1 for r in rewards if r >= 1.0),
                "train_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
                "rollout_s": round(max(ends) - min(starts), 1) if starts and ends else None}
            trained = store.get_train_round(run.id, rnd.index)
            if trained is not None:
                detail = trained.detail or {}
                entry.update(training_s=round(trained.seconds, 1), rows=trained.rows, steps=trained.steps,
                             reward_control=detail.get("reward_control"), dropped=trained.dropped)
            out.append(entry)
        return out
    finally:
        store.close()


# Outcomes that say the machine, not the policy, failed an episode: with one command per episode a healthy machine
# never reaches a task's 300 s limit, and a busy one (a load far above its cores) does, with 0 calls — a reward 0
# the model never earned. A run with any of them is not stored.
MACHINE_OUTCOMES = ("timeout", "harness_error", "no_calls", "interrupted", "setup_failed")


def episode_outcomes(run_dir: Path) -> dict[str, int]:
    """How many episodes of every round (training and evaluation) ended with each outcome."""
    from collections import Counter

    from agentlightning_cli.store import Store

    store = Store.open(run_dir)
    try:
        run = store.list_runs()[0]
        counts: Counter = Counter()
        for kind in ("train", "eval"):
            for rnd in store.list_rounds(run.id, kind=kind):
                # Ended episodes by outcome; the others by status (an episode a stopped run left is `abandoned`
                # when the resumed run redoes its slot: counted, never refused).
                counts.update((e.outcome or "no outcome") if e.status == "done" else f"status:{e.status}"
                              for e in store.list_episodes(run_id=run.id, round_id=rnd.id))
        return dict(sorted(counts.items()))
    finally:
        store.close()


def machine_failures(outcomes: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in outcomes.items() if k in MACHINE_OUTCOMES and v}


# ---- the results file (pure: tests/test_bench_learn.py) ---------------------------------------------------------

EVALUATION_KEYS = ("round", "trainings", "policy", "episodes", "unscored", "k", "pass_at_1", "pass_at_k",
                   "mean_reward", "per_task")


def heldout_change(evaluations: list[dict[str, Any]]) -> dict[str, Any]:
    """Last evaluation - round 0's, per metric, with its 95% interval: a bootstrap over tasks, both evaluations
    resampled together (the same tasks, drawn with the same seeds)."""
    ordered = sorted(evaluations, key=lambda e: e["trainings"])
    first, last = ordered[0], ordered[-1]
    if first["trainings"] != 0 or last["trainings"] == 0:
        raise ValueError(f"the held-out change needs round 0's evaluation and one after training; evaluated after "
                         f"{[e['trainings'] for e in ordered]} trainings")
    before = {t["task_id"]: t for t in first["per_task"]}
    after = {t["task_id"]: t for t in last["per_task"]}
    if set(before) != set(after):
        raise ValueError(f"the evaluations hold other tasks: {sorted(set(before) ^ set(after))}")
    tasks = list(before)
    out: dict[str, Any] = {"from_trainings": 0, "to_trainings": last["trainings"], "tasks": len(tasks)}
    for metric in METRICS:
        ci = paired_interval([before[t][metric] for t in tasks], [after[t][metric] for t in tasks])
        out[metric] = ci.to_json() if ci else None
    return out


def run_entry(summary: dict[str, Any], *, arm: str, seed: int, rounds: list[dict[str, Any]] | None = None,
              seconds: float | None = None, command: list[str] | None = None,
              settings: dict[str, Any] | None = None, note: str | None = None) -> dict[str, Any]:
    """One run's record: its evaluations as `alight run --json` printed them, and the held-out change."""
    evaluations = [{k: e.get(k) for k in EVALUATION_KEYS} for e in summary.get("evaluations") or []]
    entry = {"arm": arm, "seed": seed, "reward_control": ARMS[arm],
             "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "seconds": round(seconds, 1) if seconds is not None else None,
             "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
             "command": command, "settings": settings, "evaluations": evaluations,
             "heldout_change": heldout_change(evaluations), "rounds": rounds or []}
    if note:
        entry["note"] = note
    return entry


def merge(results: dict[str, Any] | None, entry: dict[str, Any], config: dict[str, Any],
          replace: bool = False) -> dict[str, Any]:
    """`results` with `entry` in runs[arm][seed] and the summary recomputed. Refused: a file of the earlier
    benchmark, another configuration, or a run already stored (unless `replace`)."""
    check_mergeable(results, config, entry["arm"], entry["seed"], replace)
    results = results or {"benchmark": "learn", "config": config, "runs": {}}
    results["runs"].setdefault(entry["arm"], {})[str(entry["seed"])] = entry
    results["summary"] = summarize(results)
    return results


def check_mergeable(results: dict[str, Any] | None, config: dict[str, Any], arm: str, seed: int,
                    replace: bool = False) -> None:
    """Refuse (SystemExit, saying why and what to do) a run that `merge` would refuse: checked before a run
    starts too, not only an hour later."""
    if not results:
        return
    if "runs" not in results:
        raise SystemExit("the results file holds the earlier benchmark (bench/results/learn-2026-11.json keeps a "
                         "copy): remove it, or pass --out for another file")
    if results["config"] != config:
        changed = sorted(k for k in {*config, *results["config"]} if config.get(k) != results["config"].get(k))
        raise SystemExit(f"the results file holds runs of another configuration ({', '.join(changed)} differ): "
                         "pass the same options, or --out for another file")
    if str(seed) in results["runs"].get(arm, {}) and not replace:
        raise SystemExit(f"arm {arm} seed {seed} is already in the results file: pass --replace to run it again")


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Per arm: each seed's held-out change and the mean over seeds; per seed in both arms: learn - shuffled on
    the last evaluation (paired: the same tasks and draws); and the plain answers."""
    arms: dict[str, Any] = {}
    for arm, runs in results["runs"].items():
        seeds = sorted(runs, key=int)
        changes = {s: runs[s]["heldout_change"] for s in seeds}
        arms[arm] = {"seeds": [int(s) for s in seeds], "change": changes,
                     "mean_change": {m: _mean([c[m]["estimate"] for c in changes.values() if c.get(m)])
                                     for m in METRICS}}
    versus: dict[str, Any] = {}
    learn, shuffled = results["runs"].get("learn", {}), results["runs"].get("shuffled", {})
    for seed in sorted(set(learn) & set(shuffled), key=int):
        a, b = _last(shuffled[seed]), _last(learn[seed])
        tasks = [t["task_id"] for t in a["per_task"]]
        mine = {t["task_id"]: t for t in b["per_task"]}
        if set(tasks) == set(mine):
            versus[seed] = {}
            for metric in METRICS:
                ci = paired_interval([t[metric] for t in a["per_task"]], [mine[t][metric] for t in tasks])
                versus[seed][metric] = ci.to_json() if ci else None
    return {"arms": arms, "learn_minus_shuffled": versus, "verdict": verdict(arms, versus)}


def verdict(arms: dict[str, Any], versus: dict[str, Any]) -> dict[str, Any]:
    """Whether the learn arm's held-out pass@1 gain holds on every seed (its interval above 0) and exceeds the
    shuffled arm's (the mean change over seeds, and learn - shuffled per paired seed), in words too."""
    out: dict[str, Any] = {}
    lines = []
    learn = arms.get("learn")
    if learn:
        changes = {s: c["pass_at_1"] for s, c in learn["change"].items() if c.get("pass_at_1")}
        above = [s for s, c in changes.items() if c["low"] > 0]
        positive = [s for s, c in changes.items() if c["estimate"] > 0]
        out.update(learn_seeds=len(changes), gain_on_every_seed=bool(changes) and len(above) == len(changes),
                   positive_on_every_seed=bool(changes) and len(positive) == len(changes))
        lines.append(f"learn arm, {len(changes)} seed(s): held-out pass@1 change above 0 with its 95% interval on "
                     f"{len(above)}, estimate above 0 on {len(positive)}; mean change "
                     f"{_num(learn['mean_change']['pass_at_1'])}. The gain "
                     f"{'holds' if out['gain_on_every_seed'] else 'does not hold'} on every seed.")
    control = arms.get("shuffled")
    if learn and control:
        a, b = learn["mean_change"]["pass_at_1"], control["mean_change"]["pass_at_1"]
        out["exceeds_shuffled"] = a is not None and b is not None and a > b
        out["exceeds_shuffled_on_every_paired_seed"] = bool(versus) and all(
            v["pass_at_1"] and v["pass_at_1"]["low"] > 0 for v in versus.values())
        lines.append(f"shuffled-reward arm, {len(control['seeds'])} seed(s): mean change {_num(b)}. The learn arm's "
                     f"mean change {'exceeds' if out['exceeds_shuffled'] else 'does not exceed'} it; learn - "
                     f"shuffled on the last evaluation has its interval above 0 on "
                     f"{sum(1 for v in versus.values() if v['pass_at_1'] and v['pass_at_1']['low'] > 0)} of "
                     f"{len(versus)} paired seed(s).")
    elif learn:
        lines.append("no shuffled-reward run yet: nothing says whether the gain exceeds training without a reward.")
    out["text"] = lines
    return out


def _last(entry: dict[str, Any]) -> dict[str, Any]:
    return max(entry["evaluations"], key=lambda e: e["trainings"])


def _first(entry: dict[str, Any]) -> dict[str, Any]:
    return min(entry["evaluations"], key=lambda e: e["trainings"])


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _ci(ci: dict[str, float] | None, signed: bool = False) -> str:
    if not ci:
        return "-"
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(ci['estimate'])} [{f.format(ci['low'])}, {f.format(ci['high'])}]"


def render(results: dict[str, Any]) -> list[str]:
    """The table and the answers, as lines."""
    cfg = results["config"]
    lines = [f"{cfg['model']} / {cfg['harness']}: {len(cfg['train_tasks'])} train tasks x {cfg['attempts']}, "
             f"{cfg['rounds']} rounds ({cfg['trainings']} trainings, lr {cfg['learning_rate']}); held-out "
             f"{len(cfg['heldout_tasks'])} tasks x {cfg['eval_attempts']} at round 0 and after the last training; "
             "95% intervals clustered by task",
             f"{'arm':9} {'seed':>4}  {'pass@1 round 0':>22}  {'pass@1 last':>22}  {'change':>25}  "
             f"{'mean reward change':>25}  train reward per round"]
    for arm, runs in results["runs"].items():
        for seed in sorted(runs, key=int):
            e = runs[seed]
            change = e["heldout_change"]
            rewards = " ".join(_num(r["train_reward"]).lstrip("+") for r in e.get("rounds", []))
            lines.append(f"{arm:9} {seed:>4}  {_ci(_first(e)['pass_at_1']):>22}  {_ci(_last(e)['pass_at_1']):>22}  "
                         f"{_ci(change['pass_at_1'], True):>25}  {_ci(change['mean_reward'], True):>25}  {rewards}")
    summary = results.get("summary") or summarize(results)
    for seed, v in summary["learn_minus_shuffled"].items():
        lines.append(f"seed {seed}: learn - shuffled after the last training, pass@1 {_ci(v['pass_at_1'], True)}"
                     + (f", mean reward {_ci(v['mean_reward'], True)}" if v.get("mean_reward") else ""))
    return lines + summary["verdict"]["text"]


# ---- the command ------------------------------------------------------------------------------------------------

def write_results(out: Path, results: dict[str, Any]) -> None:
    tmp = out.with_name(out.name + ".tmp")  # whole or not at all
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(out)


@contextlib.contextmanager
def results_lock(out: Path):
    """One writer of a results file at a time (a run, or --summary): two runs on 2 cores would time each other,
    and both write the file. The lock lives beside the work folders, not in bench/results."""
    key = hashlib.blake2b(str(out.resolve()).encode(), digest_size=6).hexdigest()
    (Path(tempfile.gettempdir()) / "alight-learn").mkdir(exist_ok=True)
    with open(Path(tempfile.gettempdir()) / "alight-learn" / f"results-{key}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"another bench/learn.py run holds {lock.name}: wait for it") from None
        yield


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="the run's --seed and train.seed (one seed of one arm per invocation)")
    ap.add_argument("--arm", choices=sorted(ARMS), default="learn")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--attempts", type=int, help="attempts per train task (the GRPO group size)")
    ap.add_argument("--eval-attempts", type=int, help="attempts per held-out task")
    ap.add_argument("--concurrency", type=int)
    ap.add_argument("--lr", type=float, help="train.learning_rate (both arms)")
    ap.add_argument("--epochs", type=int, help="train.epochs")
    ap.add_argument("--batch-size", type=int, help="train.batch_size")
    ap.add_argument("--grad-accum", type=int, help="train.grad_accum")
    ap.add_argument("--max-turns", type=int, help="the harness's turn limit: 1, one command per episode; 0, the "
                                                  "recipe's own")
    ap.add_argument("--temperature", type=float, help="proxy.sampling.temperature (default: the recipe's)")
    ap.add_argument("--tasks", type=int, help="the first N train tasks (0: all 16)")
    ap.add_argument("--heldout-tasks", type=int, help="only the first N held-out tasks")
    ap.add_argument("--smoke", action="store_true", help="the tiny model on 2 train and 2 held-out tasks, 2 rounds: "
                                                         "exercises the driver, measures nothing")
    ap.add_argument("--work", type=Path, help="the run's folder (default: alight-learn/<arm>-seed<S> in the system's "
                                              "temporary folder; the same command resumes a stopped run)")
    ap.add_argument("--replace", action="store_true", help="run an arm and seed already in the results again")
    ap.add_argument("--note", help="free text stored with this run")
    ap.add_argument("--busy-ok", action="store_true", help="start even when the load is above the core count")
    ap.add_argument("--summary", action="store_true", help="print the stored runs' summary and stop")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.summary:  # recomputed from the stored runs (a summary written by an older script is brought up to date)
        with results_lock(args.out):
            results = json.loads(args.out.read_text())
            summary = summarize(results)
            if summary != results.get("summary"):
                results["summary"] = summary
                write_results(args.out, results)
        print("\n".join(render(results)))
        return
    if args.seed is None:
        ap.error("--seed is required (one seed of one arm per invocation)")
    opts = {**DEFAULTS, **(SMOKE if args.smoke else {})}
    opts.update({k: v for k, v in vars(args).items() if k in DEFAULTS and v is not None})
    config = configuration(opts)
    work = args.work or Path(tempfile.gettempdir()) / "alight-learn" / f"{args.arm}-seed{args.seed}"
    work.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with results_lock(args.out):
        existing = json.loads(args.out.read_text()) if args.out.is_file() else None
        check_mergeable(existing, config, args.arm, args.seed, args.replace)  # before an hour of running, not after
        settings = settings_file(config, args.arm, args.seed)
        (work / "alight.yaml").write_text(json.dumps(settings, indent=2) + "\n")  # JSON is YAML
        cmd = command(config, args.seed, work / "run", heldout_file(config, work))
        print(f"[learn] arm {args.arm} seed {args.seed} in {work}: alight {' '.join(cmd)}", file=sys.stderr)
        load = os.getloadavg()[0]
        if load > (os.cpu_count() or 1) and not args.busy_ok:
            raise SystemExit(f"the machine is busy (load {load:.1f} on {os.cpu_count()} cores): episodes would time "
                             "out for want of CPU and score 0. Run it alone, or pass --busy-ok (a run with "
                             "timed-out episodes is not stored either way)")
        started = time.perf_counter()
        summary = run_alight(cmd, work, work / "alight.log")
        outcomes = episode_outcomes(work / "run")
        failed = machine_failures(outcomes)
        if failed:
            raise SystemExit(f"not stored: {failed} episode(s) ended for reasons of the machine, not the policy "
                             f"(all outcomes: {outcomes}); the machine was too busy? Rerun alone with --replace "
                             f"and another --work (this run's folder: {work})")
        entry = run_entry(summary, arm=args.arm, seed=args.seed, rounds=round_stats(work / "run"),
                          seconds=time.perf_counter() - started, command=["alight", *cmd], settings=settings,
                          note=args.note)
        entry["outcomes"] = outcomes
        results = merge(existing, entry, config, replace=args.replace)
        write_results(args.out, results)
    print("\n".join(render(results)))


if __name__ == "__main__":
    main()
