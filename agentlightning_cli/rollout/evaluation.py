"""Held-out evaluation inside `alight run --rounds N --eval-task-set F`: which trainings get one, and running it.

Evaluation n (the policy after n trainings, the one round n samples) runs right before round n's own episodes:
n = 0 is the base model through the zero adapter, as round 0 is served; then after every `every` trainings and
always after the last one (n = rounds - 1). It goes through the same proxy, vLLM and episode path as a round, so
it samples at the training temperature. Its episodes go into an evaluation round (store: rounds.kind = 'eval',
idx = n), which nothing that trains ever reads (Store.list_rounds returns training rounds unless asked).

Paired draws: every evaluation seeds each call from (--seed or 0, task, attempt, call index) —
proxy/control.slot_draw, not the episode id — so evaluation n and evaluation m draw alike on the same (task,
attempt) and differ only by the policy. What stays unpaired: the model's own divergence once logits differ, and a
harness whose prompt changes from one episode to the next (a date or a random id in its system prompt).

Resume: an evaluation round is a round like any other — plan_round keeps ended episodes and reruns the rest under
new tries' ids; its episode ids are hashed with the key `eval-<n>`, so they never collide with round n's.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlightning_cli.errors import AlightError

if TYPE_CHECKING:
    from agentlightning_cli.rollout.episode import RunContext
    from agentlightning_cli.store import Round

EVAL = "eval"
PAIRED_SEED = 0
"""The sampling seed of evaluation episodes when the run has no --seed: evaluations are always seeded."""


@dataclass(frozen=True)
class HeldOut:
    """The run's held-out set and how often it is evaluated."""

    task_set: Path
    tasks: list[Any]
    attempts: int
    every: int

    def due(self, index: int, rounds: int) -> bool:
        """Evaluate the policy of round `index` (after `index` trainings): the base, every `every`-th, the last."""
        return index % self.every == 0 or index == rounds - 1


def held_out(settings: Any, opts: Any, train_tasks: list[Any]) -> HeldOut | None:
    """--eval-task-set (or the eval settings) loaded and checked before anything starts; None without one.
    The flags win over the settings, which fill what a flag leaves out."""
    from agentlightning_cli.tasks import load_tasks

    path = opts.eval_task_set or settings.eval.task_set
    if path is None:
        if opts.eval_attempts is not None or opts.eval_every is not None:
            raise AlightError("--eval-attempts and --eval-every need --eval-task-set FILE",
                              "name the held-out task set (or set eval.task_set)")
        return None
    attempts = opts.eval_attempts if opts.eval_attempts is not None else settings.eval.attempts
    every = opts.eval_every if opts.eval_every is not None else settings.eval.every
    for flag, value in (("--eval-attempts", attempts), ("--eval-every", every)):
        if value < 1:
            raise AlightError(f"{flag} must be at least 1, got {value}")
    if opts.executor != "local":
        raise AlightError("--eval-task-set runs with --executor local only for now",
                          "evaluate afterwards with `alight eval --adapter DIR`")
    tasks = load_tasks(Path(path), opts.swebench_mirror)
    if not tasks:
        raise AlightError(f"held-out task set {path} has no tasks", "add one JSON object per line")
    from agentlightning_cli.tasks.harbor import refuse_held_out

    refuse_held_out(Path(path), tasks)
    check_disjoint(path, tasks, opts.task_set, train_tasks)
    return HeldOut(Path(path).absolute(), tasks, attempts, every)


def check_disjoint(path: Path, held: list[Any], train_set: Path, train: list[Any]) -> None:
    """A held-out task that is also trained on measures memory, not learning: refused, naming the ids."""
    trained = {t.id for t in train}
    both = [t.id for t in held if t.id in trained]
    if both:
        shown = ", ".join(both[:20]) + (f" and {len(both) - 20} more" if len(both) > 20 else "")
        raise AlightError(f"the held-out set {path} shares {len(both)} task id(s) with the train set {train_set}: "
                          f"{shown}", "take those tasks out of one of the two files (the held-out set must be tasks "
                          "the run never trains on)")


def say(text: str) -> None:
    print(f"alight run: {text}", file=sys.stderr, flush=True)


async def evaluate(run: RunContext, held: HeldOut, index: int, served: Round, concurrency: int) -> Round:
    """Evaluation `index` under the policy round `index` is served with: its round made (or found: resume), its
    episodes run (those an earlier run ended are kept), the round marked done."""
    from agentlightning_cli.rollout.progress import Progress
    from agentlightning_cli.rollout.round import run_round

    store = run.store
    rnd = next((r for r in store.list_rounds(run.run_id, kind=EVAL) if r.index == index), None)
    if rnd is None:
        rnd = store.create_round(run.run_id, index, served.policy, served.adapter_path, kind=EVAL)
    elif rnd.status == "done":
        return rnd
    say(f"evaluation {index} (after {index} training(s), policy {rnd.policy}): {len(held.tasks)} held-out task(s) x "
        f"{held.attempts}")
    ctx = dataclasses.replace(run.for_round(rnd.id), paired_seeds=True,
                              seed=PAIRED_SEED if run.seed is None else run.seed)
    await run_round(ctx, f"{EVAL}-{index}", held.tasks, held.attempts, concurrency,
                    Progress(len(held.tasks) * held.attempts))
    store.finish_round(rnd.id, "done")
    return store.get_round(rnd.id)


def evaluations_complete(store: Any, run_id: str, held: HeldOut | None, rounds: int) -> bool:
    """Every evaluation this run owes has ended (a rerun of a finished run then starts nothing)."""
    if held is None:
        return True
    done = {r.index for r in store.list_rounds(run_id, kind=EVAL) if r.status == "done"}
    return all(i in done for i in range(rounds) if held.due(i, rounds))
