"""One round of a run: plan (resume), clean what an earlier run left, run the slots, summarise.

Interrupted (Ctrl-C, a dead vLLM): the episodes that did not end are marked `interrupted`, their processes
killed and their half-made workspaces removed; the next run of the same command redoes exactly those.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agentlightning_cli.rollout import stale
from agentlightning_cli.rollout.episode import Ended, RoundContext
from agentlightning_cli.rollout.plan import ABANDONED, FINAL, plan_round
from agentlightning_cli.rollout.progress import Progress
from agentlightning_cli.rollout.scheduler import run_slots

INTERRUPTED = "interrupted"


def resume_plan(ctx: RoundContext, round_index: int | str, tasks: list[Any], attempts: int):
    """The plan for this round; episodes an earlier run left unfinished are marked abandoned and cleaned."""
    existing = ctx.store.list_episodes(run_id=ctx.run_id, round_id=ctx.round_id)
    plan = plan_round(ctx.run_id, round_index, tasks, attempts, existing)
    for episode_id in plan.abandon:
        ctx.store.update_episode(episode_id, status=ABANDONED, ended_at=time.time(),
                                 error="the run stopped before this episode ended; its slot was run again")
    stale.remove_leftovers(ctx.run_dir, plan.abandon)
    return plan


async def run_round(ctx: RoundContext, round_index: int | str, tasks: list[Any], attempts: int, concurrency: int,
                    progress: Progress | None = None) -> list[Ended]:
    plan = await asyncio.to_thread(resume_plan, ctx, round_index, tasks, attempts)
    progress = progress or Progress(len(tasks) * attempts)
    progress.total, progress.done = len(tasks) * attempts, len(plan.kept)
    if plan.kept:
        progress.message(f"resuming: {len(plan.kept)} episode(s) already ended are kept, {len(plan.todo)} to run")

    def on_end(ended: Ended) -> None:
        progress.finished_one(ended.slot.episode_id, ended.slot.task.id, ended.slot.attempt, ended.status,
                              ended.outcome, ended.reward, ended.calls, ended.tokens, ended.why)

    try:
        with progress:
            # Here, or on a Ray cluster's nodes (rollout/ray_executor.py): the same plan, store and endings.
            runner = run_slots if ctx.executor is None else ctx.executor.run_slots
            return await runner(ctx, plan.todo, concurrency, progress.started_one, on_end)
    except BaseException:
        await asyncio.shield(asyncio.to_thread(mark_interrupted, ctx))
        raise


def mark_interrupted(ctx: RoundContext) -> list[str]:
    """Episodes of the round that had not ended: marked interrupted, processes killed, folders removed."""
    stale.kill_run_processes(ctx.run_dir)
    left = [e.id for e in ctx.store.list_episodes(run_id=ctx.run_id, round_id=ctx.round_id)
            if e.status not in FINAL and e.status not in (ABANDONED, INTERRUPTED)]
    for episode_id in left:
        ctx.proxy.end_episode(episode_id)  # nothing left of it may still call
        ctx.store.update_episode(episode_id, status=INTERRUPTED, ended_at=time.time(),
                                 error="the run was stopped while this episode was running; a rerun redoes it")
    stale.remove_leftovers(ctx.run_dir, left)
    return left


def final_episodes(store: Any, run_id: str, round_id: str) -> list[Any]:
    return [e for e in store.list_episodes(run_id=run_id, round_id=round_id) if e.status in FINAL]
