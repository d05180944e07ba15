"""`alight run --rounds N`: round after round, training between them, resumable at any point.

Between round n and n+1: the proxy pauses and drains (no call is half on the old policy), round n's episodes
train a LoRA adapter (train/round_step.py, in a thread: the event loop keeps serving), vLLM loads it as
policy-r{n+1}, the proxy switches to it and resumes, the old adapter is unloaded, and round n+1 gets its row
(with the adapter's path). A rerun finds the rounds already in the store: a finished round is not run again, a
round whose row exists already has its adapter, and training is redone only if the run stopped inside it.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, Callable


def say(text: str) -> None:
    print(f"alight run: {text}", file=sys.stderr, flush=True)


def round_row(store: Any, run_id: str, index: int) -> Any:
    return next((r for r in store.list_rounds(run_id) if r.index == index), None)


async def run_rounds(settings: Any, opts: Any, ctx: Any, tasks: list[Any], proxy: Any, policy: Any,
                     model: Path | None, play_round: Callable[[int], Any]) -> tuple[str, list[str]]:
    """Runs rounds 0..N-1 (play_round(index) runs one, with ctx.round_id set); returns the last round id and notes."""
    store, notes = ctx.store, []
    for index in range(opts.rounds):
        rnd = round_row(store, ctx.run_id, index)
        if rnd is None:  # round 0 on a fresh run (later rows are made when their adapter is ready)
            rnd = store.create_round(ctx.run_id, index, proxy.policy or "upstream",
                                     str(policy.adapter_dir(index)) if policy else None)
        elif policy is not None and rnd.policy != proxy.policy:  # resuming at a later round: serve its adapter
            served = int(rnd.policy.rsplit("-r", 1)[1])  # policy-rK: the round whose adapter this round samples
            await _serve_adapter(proxy, policy, served, Path(rnd.adapter_path), rnd.policy)
        ctx.round_id = rnd.id
        if opts.rounds > 1:
            say(f"round {index} of {opts.rounds - 1} (policy {rnd.policy})")
        await play_round(index)
        store.finish_round(rnd.id, "done")
        if index + 1 < opts.rounds and round_row(store, ctx.run_id, index + 1) is None:
            notes.append(await _train_between(settings, ctx, proxy, policy, model, index, rnd))
    return ctx.round_id, [n for n in notes if n]


async def _train_between(settings: Any, ctx: Any, proxy: Any, policy: Any, model: Path | None, index: int,
                         rnd: Any) -> str | None:
    from agentlightning_cli.train.round_step import NothingToTrain, train_round

    store = ctx.store
    await proxy.pause()
    await proxy.drain()
    out_dir = policy.adapter_dir(index + 1)
    try:
        report = await asyncio.to_thread(train_round, store, ctx.run_id, index, base_model=model, settings=settings,
                                         out_dir=out_dir)
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
    name = await _serve_adapter(proxy, policy, index + 1, out_dir, None)
    store.create_round(ctx.run_id, index + 1, name, str(out_dir))
    note = (f"round {index} -> {index + 1}: trained {report.rows} rows from {report.calls} calls in {report.steps} "
            f"steps ({report.seconds:.0f} s); serving {name}")
    say(note)
    return note


async def _serve_adapter(proxy: Any, policy: Any, index: int, path: Path, name: str | None) -> str:
    """Load round `index`'s adapter into vLLM, switch the proxy to it, unload the one it replaces."""
    old = proxy.policy
    if name is not None and name == old:
        return name
    new = await asyncio.to_thread(policy.load, index, path)
    proxy.set_policy(new)
    proxy.resume()
    if old and old != new:
        try:
            await asyncio.to_thread(policy.unload, old)
        except Exception as exc:  # noqa: BLE001 - an adapter left loaded costs memory, not correctness
            say(f"could not unload {old}: {exc}")
    return new
