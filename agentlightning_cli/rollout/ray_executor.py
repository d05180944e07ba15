"""`alight run --executor ray`: each episode a Ray task on a worker node; the head keeps the store and the proxy.

The head creates each episode's row and key (episode.create), sends a NodeJob to a node that offers the custom
resource `alight_episode` (one unit per running episode: `ray start --resources='{"alight_episode": N}'` caps
a node at N), and records the Result it gets back (episode.record): the store has one writer, on the head.
At most `--concurrency` episodes are out at once (back-pressure: the next is sent when one comes back).

Failures, and what a rerun does with them:
- a node's worker process or the node itself is lost mid-episode: that episode is marked `abandoned` (its calls
  stay) and its slot is sent again once, under the next try's id; lost twice, it is left `interrupted`, which a
  rerun of the same command redoes;
- an episode past its whole deadline (harness + setup + reward time, plus a margin) is cancelled on its node (the
  worker process is killed and its sandbox with it, bubblewrap dies with its parent) and left `interrupted`;
- the head stopped (Ctrl-C, a dead vLLM): every task still out is cancelled, and the round marks its episodes
  `interrupted` as on one machine; resuming works exactly as without Ray.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from agentlightning_cli.errors import AlightError
from agentlightning_cli.rollout import episode
from agentlightning_cli.rollout.episode import Ended, Result, RoundContext
from agentlightning_cli.rollout.plan import Slot
from agentlightning_cli.rollout.remote import NodeJob, NodeResult, run_on_node

RESOURCE = "alight_episode"
DEADLINE_MARGIN_S = 120.0
LOCAL_ADDRESSES = {"127.0.0.1", "localhost", "::1"}


def say(text: str) -> None:
    print(f"alight run: {text}", file=sys.stderr, flush=True)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise AlightError("--executor ray needs Ray, which is not installed here",
                          hint="pip install 'agentlightning-cli[ray]' (Ray 2.60) on the head and every worker node") from None
    return ray


class RayExecutor:
    """Connected once per run (`connect`), used by every round (`run_slots`), disconnected at the end (`close`)."""

    def __init__(self, address: str | None, concurrency: int):
        self.address, self.concurrency = address, concurrency
        self.proxy_url = ""
        self.nodes: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"episodes": 0, "round_trips_ms": []})
        self.redone = 0
        self._ray: Any = None
        self._started_local = False

    def connect(self) -> None:
        """Join the cluster at `address` (or start a one-machine Ray with `concurrency` episode slots) and check that
        some node offers episode slots."""
        ray = import_ray()
        if self.address:
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level="ERROR")
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise AlightError(f"cannot join the Ray cluster at {self.address}: {exc}",
                                  hint="start it with `ray start --head` and pass the address it prints") from None
        else:
            ray.init(resources={RESOURCE: self.concurrency}, include_dashboard=False, log_to_driver=False,
                     logging_level="ERROR")
            self._started_local = True
        self._ray = ray
        slots = ray.cluster_resources().get(RESOURCE, 0)
        if slots < 1:
            self.close()
            raise AlightError(f"no node of the Ray cluster at {self.address} offers the {RESOURCE!r} resource, so no"
                              " episode could be placed",
                              hint=f"start each worker node with `ray start --address {self.address} "
                                   f"--resources='{{\"{RESOURCE}\": N}}'` (N: episodes it runs at once)")
        say(f"Ray: {len(self._alive_nodes())} node(s), {slots:g} episode slot(s) ({RESOURCE})")

    def _alive_nodes(self) -> list[dict[str, Any]]:
        return [n for n in self._ray.nodes() if n.get("Alive")]

    def set_proxy(self, proxy_base_url: str) -> None:
        """The proxy's URL as the nodes reach it. A proxy bound to every address (0.0.0.0) is reached at the head's
        address; one bound to loopback only by nodes on this machine, so a cluster with other machines is refused."""
        url = urlsplit(proxy_base_url)
        host = url.hostname or "127.0.0.1"
        if host in ("0.0.0.0", "::"):
            host = self._ray.util.get_node_ip_address()
        elif host in LOCAL_ADDRESSES:
            here = self._ray.util.get_node_ip_address()
            others = sorted({n["NodeManagerAddress"] for n in self._alive_nodes()
                             if n.get("Resources", {}).get(RESOURCE)} - {here, *LOCAL_ADDRESSES})
            if others:
                raise AlightError(f"the proxy listens on {host}, which the episode nodes at {', '.join(others)} "
                                  "cannot reach",
                                  hint="set proxy.host: 0.0.0.0 in alight.yaml (or the head's address); every episode"
                                       " authenticates with its own key")
        self.proxy_url = f"http://{host}:{url.port}"

    def close(self) -> None:
        if self._ray is not None and self._ray.is_initialized():
            self._ray.shutdown()
        self._ray = None

    def note(self) -> str | None:
        """The summary's line: episodes per node and the median round trip from each node to the proxy."""
        if not self.nodes:
            return None
        parts = []
        for (address, node_id), seen in sorted(self.nodes.items()):
            trips = sorted(seen["round_trips_ms"])
            trip = f", proxy round trip {trips[len(trips) // 2]:.2f} ms" if trips else ""
            parts.append(f"{address} (node {node_id[:8]}) {seen['episodes']} episode(s){trip}")
        redone = f"; {self.redone} episode(s) redone after their node was lost" if self.redone else ""
        return f"Ray ran the episodes on {len(self.nodes)} node(s): " + "; ".join(parts) + redone

    # -- one round ---------------------------------------------------------------------------------------
    async def run_slots(self, ctx: RoundContext, slots: list[Slot], concurrency: int, on_start: Callable[[], None],
                        on_end: Callable[[Ended], None]) -> list[Ended]:
        ray = self._ray
        task = ray.remote(run_on_node).options(num_cpus=0, resources={RESOURCE: 1}, max_retries=0)
        out_now = asyncio.Semaphore(max(1, concurrency))
        endings: list[Ended] = []

        async def one(slot: Slot, tries_left: int) -> None:
            async with out_now:
                key = await asyncio.to_thread(episode.create, ctx, slot)
                await asyncio.to_thread(ctx.store.update_episode, slot.episode_id, status="running",
                                        started_at=time.time())
                on_start()
                sent = time.monotonic()
                ref = task.remote(self._job(ctx, slot, key))
                try:
                    got = await self.wait_for_episode(ref, _deadline(ctx, slot))
                except BaseException:  # the round stops (Ctrl-C, a dead vLLM): the worker process is killed and
                    ray.cancel(ref, force=True)  # its sandbox dies with it
                    raise
            if isinstance(got, NodeResult):  # sent -> back, against the node's own prepare_s + run_s: Ray's cost
                got.result.timings["head_wait_s"] = time.monotonic() - sent
            if isinstance(got, str):  # lost with its node or worker
                if tries_left:
                    self.redone += 1
                    await asyncio.to_thread(ctx.store.update_episode, slot.episode_id, status="abandoned",
                                            ended_at=time.time(), error=f"{got}; its slot was sent again")
                    say(f"episode {slot.episode_id} ({slot.task.id}): {got}; sending it again")
                    return await one(await asyncio.to_thread(_next_try, ctx, slot), tries_left - 1)
                got = NodeResult(Result("interrupted", error=f"{got}, twice; a rerun of the command redoes it", why=got))
            await asyncio.to_thread(self._record, ctx, slot, got)
            ended = await episode.ended(ctx.store, slot, got.result)
            endings.append(ended)
            on_end(ended)

        jobs = [asyncio.ensure_future(one(slot, 1)) for slot in slots]
        try:
            await asyncio.gather(*jobs)
        except BaseException:
            for job in jobs:
                job.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)
            raise
        return endings

    async def wait_for_episode(self, ref: Any, deadline_s: float) -> NodeResult | str:
        """The node's result; a reason string when the node or its worker was lost; an `interrupted` result when
        the deadline passed (the task is cancelled on its node)."""
        ray = self._ray
        lost = tuple(getattr(ray.exceptions, name) for name in
                     ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "ObjectLostError", "OwnerDiedError")
                     if hasattr(ray.exceptions, name))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), deadline_s)
        except asyncio.TimeoutError:
            ray.cancel(ref, force=True)
            why = f"the episode ran past its whole deadline ({deadline_s:.0f} s) on its node; cancelled there"
            return NodeResult(Result("interrupted", error=why + "; a rerun of the command redoes it", why=why))
        except lost as exc:
            return f"the Ray worker running it was lost ({type(exc).__name__})"
        except ray.exceptions.RayTaskError as exc:  # alight's own code failed on the node
            why = f"the episode failed on its node: {exc}"[:2000]
            return NodeResult(Result("interrupted", error=why, why=why.splitlines()[0]))

    def _job(self, ctx: RoundContext, slot: Slot, key: str) -> NodeJob:
        budgets = getattr(ctx.proxy, "budgets", None)  # proxy/control.Budgets of alight's own proxy
        budgeted = budgets is not None and (budgets.max_calls is not None or budgets.max_completion_tokens is not None)
        return NodeJob(run_id=ctx.run_id, slot=slot, key=key, proxy_url=self.proxy_url,
                       settings=ctx.episode_settings(), budgeted=budgeted)

    def _record(self, ctx: RoundContext, slot: Slot, got: NodeResult) -> None:
        """Into the head's store and run folder: the Result, and the harness's log tails where `alight inspect`
        finds an episode's logs."""
        episode.record(ctx.store, slot.episode_id, got.result)
        folder = got.node.get("folder")
        if folder and got.result.status != "setup_failed":  # where the workspace was: on its node, not the head
            ctx.store.update_episode(slot.episode_id, workspace=str(Path(folder) / "workspaces" / slot.episode_id))
        logs = Path(ctx.run_dir) / "logs" / "episodes"
        for name, data in got.logs.items():
            logs.mkdir(parents=True, exist_ok=True)
            (logs / f"{slot.episode_id}.{name}").write_bytes(data)
        if got.node:
            seen = self.nodes[(got.node.get("address", "?"), got.node.get("node_id", "?"))]
            seen["episodes"] += 1
            if "proxy_round_trip_ms" in got.node:
                seen["round_trips_ms"].append(got.node["proxy_round_trip_ms"])


def _deadline(ctx: RoundContext, slot: Slot) -> float:
    harness = ctx.timeout_s or slot.task.timeout_s or ctx.recipe.timeout_s or 3600.0
    return float(harness) + ctx.setup_timeout_s + ctx.reward_timeout_s + DEADLINE_MARGIN_S


def _next_try(ctx: RoundContext, slot: Slot) -> Slot:
    """The slot under its next try's id (plan.episode_id's `.N`), counted from the store as a rerun would."""
    tries = [e for e in ctx.store.list_episodes(run_id=ctx.run_id, round_id=ctx.round_id)
             if e.task_id == slot.task.id and e.attempt == slot.attempt]
    base = slot.episode_id.split(".", 1)[0]
    return Slot(slot.task, slot.attempt, f"{base}.{len(tries)}")

