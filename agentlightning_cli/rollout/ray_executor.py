"""`alight run --executor ray`: each episode a Ray task on a worker node; the head keeps the store and the proxy.

The head creates each episode's row and key (episode.create), sends a NodeJob to a node that offers the custom
resource `alight_episode` (one unit per running episode: `ray start --resources='{"alight_episode": N}'` caps
a node at N), and records the Result it gets back (episode.record): the store has one writer, on the head.
At most `--concurrency` episodes are out at once (back-pressure: the next is sent when one comes back). The task's
local sources go with the job through Ray's object store (rollout/ship.py): the cluster needs no shared file system.

Failures, and what a rerun does with them (waiting: rollout/ray_wait.py):
- any Ray failure of one episode's task (its worker process or node lost, Ray's memory monitor, a task Ray cannot
  schedule or whose runtime environment fails, alight's own code failing on the node): that episode is marked
  `abandoned` with Ray's reason (its calls stay) and its slot is sent again once, under the next try's id; failed
  twice, it is left `interrupted`, which a rerun of the same command redoes. Never the round;
- an episode past its whole deadline (harness + setup + reward time, plus a margin), counted from its start on its
  node, is cancelled there (the worker process is killed and its sandbox with it) and left `interrupted`; one that
  no node starts within the queue timeout (`ray.queue_timeout_s`, counted while a slot is free) likewise;
- the head stopped (Ctrl-C, a dead vLLM): every task still out is cancelled, and the round marks its episodes
  `interrupted` as on one machine; resuming works exactly as without Ray.
Under `--sandbox container` a container outlives a killed worker (the runtime's monitor is its parent), so the head
removes an episode's containers on its node when the episode is lost or cancelled, and every node's containers of
the run at the start and end of each round (by their workspace label, sandbox/container.py).

alight's own one-machine cluster (no `--ray-address`) uses Ray's token authentication with a fresh token of the run,
held in this process's environment only; joining a cluster, the token is the user's (RAY_AUTH_MODE=token and
RAY_AUTH_TOKEN or ~/.ray/auth_token, as for any Ray client).
"""

from __future__ import annotations

import asyncio
import os
import secrets
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
from agentlightning_cli.rollout.ray_wait import Lost, wait_for_episode
from agentlightning_cli.rollout.remote import NodeJob, NodeResult, episode_task, remove_containers

RESOURCE = "alight_episode"
DEADLINE_MARGIN_S = 120.0
SWEEP_TIMEOUT_S = 120.0
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

    def __init__(self, address: str | None, concurrency: int, queue_timeout_s: float = 600.0):
        self.address, self.concurrency, self.queue_timeout_s = address, concurrency, queue_timeout_s
        self.proxy_url = ""
        self.nodes: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"episodes": 0, "round_trips_ms": []})
        self.redone = 0
        self.swept = 0
        """Containers of the run's episodes removed on the nodes (lost or cancelled episodes, round ends)."""
        self._ray: Any = None
        self._shipper: Any = None
        self._started_local = False

    def connect(self) -> None:
        """Join the cluster at `address` (or start a one-machine Ray with `concurrency` episode slots, token
        authenticated) and check that some node offers episode slots."""
        if not self.address:
            _own_token()  # before Ray reads its settings: the cluster and every process it starts use it
        ray = import_ray()
        if self.address:
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level="ERROR")
            except ray.exceptions.AuthenticationError as exc:
                raise AlightError(f"the Ray cluster at {self.address} refused alight: {exc.message}",
                                  hint="give this process the cluster's token: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN="
                                       "(what `ray get-auth-token` prints on the head) or the file ~/.ray/auth_token"
                                  ) from None
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise AlightError(f"cannot join the Ray cluster at {self.address}: {exc}",
                                  hint="start it with `ray start --head` and pass the address it prints") from None
        else:
            # "local": always a new cluster of our own, never one a `ray start` left running on this machine
            ray.init(address="local", resources={RESOURCE: self.concurrency}, include_dashboard=False,
                     log_to_driver=False, logging_level="ERROR")
            self._started_local = True
            say(f"Ray: started a one-machine cluster at {ray.get_runtime_context().gcs_address} (token "
                "authentication, a token of this run's own)")
        self._ray = ray
        from agentlightning_cli.rollout.ship import Shipper

        self._shipper = Shipper(ray)
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
        redone = f"; {self.redone} episode(s) redone after a Ray failure (node or worker lost)" if self.redone else ""
        swept = f"; {self.swept} leftover container(s) removed on the nodes" if self.swept else ""
        return f"Ray ran the episodes on {len(self.nodes)} node(s): " + "; ".join(parts) + redone + swept

    # -- one round ---------------------------------------------------------------------------------------
    async def run_slots(self, ctx: RoundContext, slots: list[Slot], concurrency: int, on_start: Callable[[], None],
                        on_end: Callable[[Ended], None]) -> list[Ended]:
        ray = self._ray
        task = ray.remote(episode_task).options(num_cpus=0, resources={RESOURCE: 1}, max_retries=0)
        out_now = asyncio.Semaphore(max(1, concurrency))
        endings: list[Ended] = []
        counted: set[tuple[str, int]] = set()  # slots shown as running (once, whatever their tries)
        await self.sweep(ctx)  # what a killed head or worker left on the nodes

        async def started(slot: Slot, report: dict[str, Any]) -> None:
            await asyncio.to_thread(ctx.store.update_episode, slot.episode_id, status="running",
                                    started_at=report.get("at") or time.time())
            if (slot.task.id, slot.attempt) not in counted:
                counted.add((slot.task.id, slot.attempt))
                on_start()

        async def one(slot: Slot, tries_left: int) -> None:
            async with out_now:
                key = await asyncio.to_thread(episode.create, ctx, slot)
                sent = time.monotonic()
                try:
                    shipments = await asyncio.to_thread(self._shipper.for_task, slot.task)
                except AlightError as exc:  # the head's own copy is gone: this episode cannot be set up anywhere
                    got: NodeResult | Lost = NodeResult(episode.setup_failed(exc.message + f" ({exc.hint})"))
                else:
                    gen = task.remote(self._job(ctx, slot, key, shipments))
                    try:
                        got = await wait_for_episode(ray, gen, _deadline(ctx, slot), self.queue_timeout_s, RESOURCE,
                                                     lambda report: started(slot, report))
                    except BaseException:  # the round stops (Ctrl-C, a dead vLLM): the worker process is killed
                        ray.cancel(gen, force=True)  # and its sandbox dies with it (a container: swept below)
                        ctx.proxy.end_episode(slot.episode_id)
                        raise
                # Back from its node (or lost there): its key stops working before the next slot is sent, so
                # nothing it left behind can call the model or record into it (the node needed the key until now,
                # for the call count). A redo runs under a new id and key.
                ctx.proxy.end_episode(slot.episode_id)
            if isinstance(got, NodeResult):  # sent -> back, against the node's own prepare_s + run_s: Ray's cost
                got.result.timings["head_wait_s"] = time.monotonic() - sent
                if got.result.status == "interrupted" and ctx.sandbox == "container":
                    await self.sweep(ctx, slot.episode_id)  # cancelled: its container is not
            if isinstance(got, Lost):
                if ctx.sandbox == "container":
                    await self.sweep(ctx, slot.episode_id)
                if tries_left:
                    self.redone += 1
                    await asyncio.to_thread(ctx.store.update_episode, slot.episode_id, status="abandoned",
                                            ended_at=time.time(), error=f"{got.why}; its slot was sent again")
                    say(f"episode {slot.episode_id} ({slot.task.id}): {got.why}; sending it again")
                    return await one(await asyncio.to_thread(_next_try, ctx, slot), tries_left - 1)
                why = f"its Ray task failed twice (last: {got.why}); a rerun of the command redoes it"
                got = NodeResult(Result("interrupted", error=why, why=got.why))
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
        finally:
            await asyncio.shield(self.sweep(ctx))  # every node, whatever ended the round
        return endings

    async def sweep(self, ctx: RoundContext, episode_id: str | None = None) -> int:
        """Under `--sandbox container`: remove the run's containers (one episode's) on every node with episode
        slots, by their workspace label; a task pinned to each node, needing no episode slot."""
        if ctx.sandbox != "container":
            return 0
        return await asyncio.to_thread(self._sweep_nodes, ctx.run_id, ctx.container_runtime, episode_id)

    def _sweep_nodes(self, run_id: str, runtime: str, episode_id: str | None) -> int:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self._ray
        sweep = ray.remote(remove_containers)
        refs = [sweep.options(num_cpus=0, max_retries=1,
                              scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(run_id, runtime, episode_id)
                for n in self._alive_nodes() if n.get("Resources", {}).get(RESOURCE)]
        if not refs:
            return 0
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=SWEEP_TIMEOUT_S)
        removed = 0
        for ref in ready:
            try:
                removed += ray.get(ref)
            except ray.exceptions.RayError as exc:  # a node gone meanwhile: its containers went with it
                say(f"removing the run's containers on a node failed: {exc}")
        self.swept += removed
        return removed

    def _job(self, ctx: RoundContext, slot: Slot, key: str, shipments: list[Any]) -> NodeJob:
        budgets = getattr(ctx.proxy, "budgets", None)  # proxy/control.Budgets of alight's own proxy
        budgeted = budgets is not None and (budgets.max_calls is not None or budgets.max_completion_tokens is not None)
        return NodeJob(run_id=ctx.run_id, slot=slot, key=key, proxy_url=self.proxy_url,
                       settings=ctx.episode_settings(), budgeted=budgeted, shipments=shipments)

    def _record(self, ctx: RoundContext, slot: Slot, got: NodeResult) -> None:
        """Into the head's store and run folder: the Result, and the harness's log tails where `alight inspect`
        finds an episode's logs."""
        count_here(ctx.store, slot.episode_id, got.result)
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


def count_here(store: Any, episode_id: str, result: Result) -> None:
    """A node that could not read the episode's call count (the proxy did not answer it) kept the harness's own
    ending; the head counts its store instead, and a finished harness that made no call is `no_calls` after all."""
    detail = result.outcome_detail or {}
    if "calls_not_read" not in detail:
        return
    result.calls = store.llm_call_count(episode_id)[0]
    detail["calls_not_read"] += f"; counted on the head instead: {result.calls}"
    if result.calls == 0 and result.outcome == "finished":
        result.outcome = "no_calls"
        result.why = result.error = "the harness exited without a single LLM call (counted on the head)"


def _own_token() -> None:
    """Token authentication for alight's own cluster, with a fresh token that lives in this process's environment
    (which the cluster's processes inherit) and nowhere on disk: no other process of the machine's users, and
    nothing on the network that reaches its ports, can join it or run code in it."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    if "ray" in sys.modules:  # Ray read its settings at import: read them again, as `ray start` does
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def _deadline(ctx: RoundContext, slot: Slot) -> float:
    harness = ctx.timeout_s or slot.task.timeout_s or ctx.recipe.timeout_s or 3600.0
    return float(harness) + ctx.setup_timeout_s + ctx.reward_timeout_s + DEADLINE_MARGIN_S


def _next_try(ctx: RoundContext, slot: Slot) -> Slot:
    """The slot under its next try's id (plan.episode_id's `.N`), counted from the store as a rerun would."""
    tries = [e for e in ctx.store.list_episodes(run_id=ctx.run_id, round_id=ctx.round_id)
             if e.task_id == slot.task.id and e.attempt == slot.attempt]
    base = slot.episode_id.split(".", 1)[0]
    return Slot(slot.task, slot.attempt, f"{base}.{len(tries)}")

