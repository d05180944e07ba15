"""The head waiting for one episode's Ray task (remote.episode_task, a streaming generator): queue, start, end.

Three clocks, kept apart:
- the queue timeout: from submission until the node reports the episode started. It runs only while the cluster
  has a free episode slot (`alight_episode` available), so waiting behind busy slots (more `--concurrency` than
  the cluster has slots) never counts; an episode no node can schedule ends `interrupted`, naming the timeout;
- the deadline (harness + setup + reward time + a margin): from the node's start report, not from submission;
  past it the task is cancelled on its node (its worker process killed) and the episode ends `interrupted`;
- none for the head itself: a Ctrl-C cancels the task (the caller's job).

Any Ray failure of the task — its worker or node lost, Ray's memory monitor killing it (OutOfMemoryError), a task
Ray cannot schedule (TaskUnschedulableError), a runtime environment that fails to set up, alight's own code
failing on the node (RayTaskError, whatever it wraps: a TimeoutError in there is not the deadline) — is that
episode's alone: it comes back as `Lost`, with Ray's reason, and the executor abandons and redoes the episode once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable

from agentlightning_cli.rollout.episode import Result
from agentlightning_cli.rollout.remote import NodeResult

POLL_S = 1.0
"""How often a queued episode looks whether the cluster has a free slot (its queue clock runs only then)."""


@dataclass
class Lost:
    """The episode's Ray task failed (Ray's reason); `started` is where it ran, when the node had reported it."""

    why: str
    started: dict[str, Any] | None = None


async def wait_for_episode(ray: Any, gen: Any, deadline_s: float, queue_timeout_s: float, resource: str,
                           on_started: Callable[[dict[str, Any]], Any] | None = None) -> NodeResult | Lost:
    """The NodeResult; Lost on a Ray failure; an `interrupted` NodeResult past the queue timeout or the deadline
    (the task cancelled). `on_started(report)` is awaited when the node reports the start."""
    waits: list[asyncio.Future] = []
    try:
        return await _wait(ray, gen, deadline_s, queue_timeout_s, resource, on_started, waits)
    finally:
        for fut in waits:  # cancelled from outside (Ctrl-C): the caller cancels the task itself
            fut.cancel()


async def _wait(ray: Any, gen: Any, deadline_s: float, queue_timeout_s: float, resource: str,
                on_started: Callable[[dict[str, Any]], Any] | None, waits: list[asyncio.Future]) -> NodeResult | Lost:
    first = asyncio.ensure_future(_next(gen))
    waits.append(first)
    queued = 0.0
    while True:
        looked = time.monotonic()
        done, _ = await asyncio.wait({first}, timeout=POLL_S)
        if done:
            break
        if await asyncio.to_thread(_free_slot, ray, resource):  # a slot is free, yet no node started it
            queued += time.monotonic() - looked
        if queued >= queue_timeout_s:
            first.cancel()
            _cancel(ray, gen)
            why = (f"no node started the episode within its queue timeout ({queue_timeout_s:g} s while the cluster "
                   "had a free episode slot): no node can schedule it; cancelled")
            return _interrupted(why, {"queued_s": queued})
    try:
        started = first.result()
    except ray.exceptions.RayError as exc:
        return Lost(reason(exc))
    if on_started is not None:
        await on_started(started)
    rest = asyncio.ensure_future(_next(gen))
    waits.append(rest)
    done, _ = await asyncio.wait({rest}, timeout=deadline_s)  # our own clock: no exception type is read as it
    if not done:
        rest.cancel()
        _cancel(ray, gen)
        why = (f"the episode ran past its whole deadline ({deadline_s:.0f} s from its start on its node); "
               "cancelled there")
        return _interrupted(why, {})
    try:
        return rest.result()
    except ray.exceptions.RayError as exc:
        return Lost(reason(exc), started)


async def _next(gen: Any) -> Any:
    ref = await gen.__anext__()
    return await ref


def _free_slot(ray: Any, resource: str) -> bool:
    return ray.available_resources().get(resource, 0) >= 1


def _cancel(ray: Any, gen: Any) -> None:
    try:
        ray.cancel(gen, force=True)  # kills the worker process, and a bubblewrap sandbox with it
    except Exception:  # noqa: BLE001 - already finished or gone: nothing left to cancel
        pass


def _interrupted(why: str, timings: dict[str, float]) -> NodeResult:
    return NodeResult(Result("interrupted", error=why + "; a rerun of the command redoes it", why=why, timings=timings))


def reason(exc: BaseException) -> str:
    """Ray's reason in one line: its type (for a task error, what it wraps) and the first line of its message."""
    cause = getattr(exc, "cause", None)
    name = type(exc).__name__ if cause is None else f"{type(exc).__name__} wrapping {type(cause).__name__}"
    text = str(cause if cause is not None else exc).strip().splitlines()
    first = next((line.strip() for line in text if line.strip() and not line.startswith("ray::")), "")
    return f"{name}: {first[:300]}" if first else name
