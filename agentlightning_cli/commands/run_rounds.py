"""`alight run --rounds N`: round after round, training between them, resumable at any point.

Between round n and n+1: the proxy pauses and drains (no call is half on the old policy), vLLM sleeps where it can
(a GPU it shares with the trainer: serve.sleep_between_rounds), round n's episodes train a LoRA adapter
(train/round_step.py, in a thread: the event loop keeps serving), vLLM wakes and loads it as
policy-r{n+1}, the proxy switches to it and resumes, the old adapter is unloaded, and round n+1 gets its row
(with the adapter's path). A rerun finds the rounds already in the store: a finished round is not run again, a
round whose row exists already has its adapter, and training is redone only if the run stopped inside it.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from agentlightning_cli.rollout.episode import RunContext

if TYPE_CHECKING:
    from agentlightning_cli.commands.run_checks import RunOptions
    from agentlightning_cli.config import Settings
    from agentlightning_cli.proxy.server import Proxy
    from agentlightning_cli.serve.policy import PolicyServer
    from agentlightning_cli.store import Round, Store
    from agentlightning_cli.tasks.model import Task
    from agentlightning_cli.train.trackers import Tracker


def say(text: str) -> None:
    print(f"alight run: {text}", file=sys.stderr, flush=True)


def round_row(store: Store, run_id: str, index: int) -> Round | None:
    return next((r for r in store.list_rounds(run_id) if r.index == index), None)


async def run_rounds(settings: Settings, opts: RunOptions, run: RunContext, tasks: list[Task], policy: PolicyServer | None,
                     model: Path | None) -> tuple[str, list[str]]:
    """Runs rounds 0..N-1 (each in its own round context), training between them; returns the last round's id
    and the notes of what happened between rounds."""
    from agentlightning_cli.rollout.evaluation import evaluate, held_out
    from agentlightning_cli.rollout.heldout import evaluation_metrics
    from agentlightning_cli.rollout.progress import Progress
    from agentlightning_cli.rollout.round import run_round
    from agentlightning_cli.train.round_metrics import rollout_metrics
    from agentlightning_cli.train.trackers import Tracker, step_of

    store, proxy, notes, last = run.store, run.proxy, [], ""
    held = held_out(settings, opts, tasks)  # --eval-task-set (checked before anything started: commands/run.py)

    # train.report_to: one tracker run for the whole alight run, reopened by a resume (train/trackers.py)
    tracker = Tracker.open(settings.train.report_to, run.run_dir, store.get_run(run.run_id).name)
    try:
        for index in range(opts.rounds):
            rnd = round_row(store, run.run_id, index)
            if rnd is None:  # round 0 on a fresh run (later rows are made when their adapter is ready)
                # (servers alight did not start sample their own model in round 0: no adapter)
                rnd = store.create_round(run.run_id, index, proxy.policy or "upstream",
                                         str(getattr(policy, "first_adapter", None) or policy.adapter_dir(index))
                                         if policy and policy.starts_servers else None)
            elif policy is not None and rnd.policy != proxy.policy and rnd.adapter_path:  # resuming a later round
                await serve_adapter(proxy, policy, rnd.policy, Path(rnd.adapter_path))
            if held is not None and held.due(index, opts.rounds):  # the held-out set under the policy round `index` gets
                evaluated = await evaluate(run, held, index, rnd, opts.concurrency)
                # at the step the evaluated policy starts from: the curve lines up with the training that made it
                tracker.log_once(f"eval:{index}", step_of(store, run.run_id, index),
                                 evaluation_metrics(store, run.run_id, evaluated.id))
            if opts.rounds > 1:
                say(f"round {index} of {opts.rounds - 1} (policy {rnd.policy})")
            ctx = run.for_round(rnd.id)
            await run_round(ctx, index, tasks, opts.attempts, opts.concurrency, Progress(len(tasks) * opts.attempts))
            store.finish_round(rnd.id, "done")
            tracker.log_once(f"round:{index}", step_of(store, run.run_id, index),
                             rollout_metrics(store, run.run_id, round_row(store, run.run_id, index)))
            if index + 1 < opts.rounds and round_row(store, run.run_id, index + 1) is None:
                notes.append(await train_between(settings, ctx, policy, model, index, rnd, tracker))
            last = rnd.id
    finally:
        tracker.close()
    return last, [n for n in notes if n]


async def train_between(settings: Settings, ctx: RunContext, policy: PolicyServer, model: Path | None, index: int,
                        rnd: Round, tracker: Tracker | None = None) -> str | None:
    """Round `index` -> `index + 1`: pause and drain the proxy, sleep vLLM where it can (a GPU shared with the
    trainer), train, wake it, load the new adapter and resume; round `index + 1`'s row is made last, so a run
    stopped anywhere in here trains again on resume. Whatever happens, vLLM is awake and the proxy resumed."""
    from agentlightning_cli.serve.adapters import policy_name
    from agentlightning_cli.train.round_step import NothingToTrain, train_round

    store, proxy = ctx.store, ctx.proxy
    started = time.perf_counter()  # the round's swap time: all of this but the training
    await proxy.pause()
    await proxy.drain()
    out_dir = policy.adapter_dir(index + 1)
    asleep = policy.sleeps
    try:
        try:
            if asleep:  # inside: a sleep that fails half way is still followed by a wake-up (harmless when awake)
                say(f"vLLM sleeps while round {index} trains ({await asyncio.to_thread(policy.sleep):.1f} s)")
            report = await asyncio.to_thread(train_round, store, ctx.run_id, index, base_model=model,
                                             settings=settings, out_dir=out_dir, tracker=tracker)
        finally:
            if asleep:
                waking = asyncio.ensure_future(asyncio.to_thread(policy.wake_up))
                say(f"vLLM awake ({await asyncio.shield(waking):.1f} s)")
    except NothingToTrain as exc:
        # Nothing to learn from (e.g. every attempt scored the same): the next round samples the same policy.
        note = f"round {index} -> {index + 1}: nothing to train ({exc.message}); round {index + 1} keeps {rnd.policy}"
        say(note)
        store.create_round(ctx.run_id, index + 1, rnd.policy, rnd.adapter_path)
        proxy.resume()
        return note
    except BaseException:
        proxy.resume()
        raise
    name = await serve_adapter(proxy, policy, policy_name(index + 1), out_dir)
    store.create_round(ctx.run_id, index + 1, name, str(out_dir))
    if tracker is not None:
        from agentlightning_cli.train.round_metrics import training_metrics
        from agentlightning_cli.train.trackers import step_of

        swap = time.perf_counter() - started - report.seconds
        tracker.log_once(f"train_round:{index}", step_of(store, ctx.run_id, index + 1),
                         training_metrics(store, ctx.run_id, index, swap_seconds=swap))
    note = (f"round {index} -> {index + 1}: trained {report.rows} rows from {report.calls} calls in {report.steps} "
            f"steps ({report.seconds:.0f} s); serving {name}")
    if report.conversations:  # issue 34: conversations, forks, fallbacks, breaks per 100 calls of every kind
        from agentlightning_cli.train.conversations import ConversationCounts

        note += f"; conversations {ConversationCounts.from_dict(report.conversations).line()}"
    say(note)
    return note


async def serve_adapter(proxy: Proxy, policy: PolicyServer, name: str, path: Path) -> str:
    """Load the adapter at `path` into vLLM as `name`, switch the proxy to it, unload the one it replaces."""
    old = proxy.policy
    if name == old:
        return name
    new = await asyncio.to_thread(policy.load_as, name, path)
    proxy.set_policy(new)
    proxy.resume()
    if old and old != new:
        try:
            await asyncio.to_thread(policy.unload, old)
        except Exception as exc:  # noqa: BLE001 - an adapter left loaded costs memory, not correctness
            say(f"could not unload {old}: {exc}")
    return new
