"""The round's pipeline: workspaces are prepared ahead of the harnesses, `concurrency` harnesses at a time.

Preparers (git copy at base_commit, setup commands) fill a bounded queue of ready workspaces; harness
workers take from it. The queue holds at most `concurrency` ready workspaces, so a slot that frees up finds
the next workspace waiting (harness slots never wait on git) while the disk never holds more than about
2 x concurrency workspaces. Setup failures end their episode in the preparer and never take a harness slot.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from agentlightning_cli.rollout import episode, stale
from agentlightning_cli.rollout.episode import Ended, Prepared, RoundContext
from agentlightning_cli.rollout.plan import Slot

MAX_PREPARERS = 4


async def run_slots(ctx: RoundContext, slots: list[Slot], concurrency: int, on_start: Callable[[], None],
                    on_end: Callable[[Ended], None]) -> list[Ended]:
    """Run every slot; returns the endings. Cancelling it stops everything and leaves no process behind."""
    concurrency = max(1, concurrency)
    todo: asyncio.Queue[Slot] = asyncio.Queue()
    for slot in slots:
        todo.put_nowait(slot)
    ready: asyncio.Queue[Prepared | None] = asyncio.Queue(maxsize=concurrency)
    endings: list[Ended] = []
    n_prep = max(1, min(concurrency, MAX_PREPARERS, len(slots)))

    async def preparer() -> None:
        while True:
            try:
                slot = todo.get_nowait()
            except asyncio.QueueEmpty:
                return
            t = time.monotonic()
            key = await asyncio.to_thread(episode.create, ctx, slot)
            item = await asyncio.to_thread(episode.prepare, ctx, slot, key)
            if isinstance(item, Prepared):
                item.prep_s = time.monotonic() - t  # registration included
            if isinstance(item, Ended):
                endings.append(item)
                on_end(item)
            else:
                await ready.put(item)

    async def worker() -> None:
        while (item := await ready.get()) is not None:
            on_start()
            ended = await episode.run(ctx, item)
            endings.append(ended)
            on_end(ended)

    async def prepare_all() -> None:
        await asyncio.gather(*(preparer() for _ in range(n_prep)))
        for _ in range(concurrency):
            await ready.put(None)

    tasks = [asyncio.ensure_future(prepare_all())] + [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Reward and setup shells run in threads that a cancel cannot reach: their processes are killed
        # by their environment marker, which ends the threads' waits.
        await asyncio.to_thread(stale.kill_run_processes, ctx.run_dir)
        raise
    return endings
