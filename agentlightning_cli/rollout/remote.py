"""An episode on a Ray worker node: the node's side of `alight run --executor ray` (rollout/ray_executor.py).

The head creates the episode's row and key and sends a NodeJob; here, on whichever node Ray placed it, the
workspace is made (a task's git source fetched once per node, into the node's own folder), the harness runs in its
sandbox, the patch is taken, the hidden files revealed and the reward run, exactly as `alight run` does it on one
machine (episode.setup and episode.work). The node never touches the store: the Result goes back to the head,
the store's only writer, with the node it ran on and the tails of the harness's logs.

The harness reaches the head's proxy over TCP: sandboxed, through a relay from inside the sandbox to the proxy's
address (the harness itself is handed a loopback URL, as on one machine); `--sandbox none`, directly. Whether an
episode made any call (its `no_calls` ending) and whether the proxy refused a call over the episode's budget (its
harness is then stopped, `budget_exceeded`, as on one machine) are asked of the proxy (GET /e/<id>/alight/calls
with the key, once a second while the harness runs), which also measures the round trip from the node. The count
after the harness ends is asked again on a network blip; if the proxy still does not answer, the harness's own
ending stands and the episode says the count was not read (the head then counts its own store).

The Ray task itself (`episode_task`) first reports where and when it started — the head's deadline runs from
then, not from submission — and then returns the NodeResult. The task's local sources (hidden files, a local
repo) come with the job through Ray's object store (rollout/ship.py); a source that is still missing on the node
is a setup failure naming the node and the path, never an empty folder.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentlightning_cli.harness.runner import CallCountUnread
from agentlightning_cli.rollout.plan import Slot

LOG_TAIL_BYTES = 256 * 1024
"""Of each of the harness's stdout and stderr, what the head keeps in its run's logs."""


@dataclass
class NodeJob:
    """What the head sends for one episode (picklable: Ray ships it to the node)."""

    run_id: str
    slot: Slot
    key: str
    proxy_url: str
    """The head's proxy as the nodes reach it, e.g. http://10.0.0.1:8123."""
    settings: Any
    """episode.EpisodeSettings: recipe, install, sandbox, limits, timeouts, as the head resolved them."""
    budgeted: bool = False
    """The proxy has a call or token budget per episode: the node watches for its refusals (once a second)."""
    shipments: list = field(default_factory=list)
    """ship.Shipment: the task's local sources in Ray's object store, unpacked on the node."""


@dataclass
class NodeResult:
    result: Any
    """episode.Result"""
    node: dict[str, Any] = field(default_factory=dict)
    """node id, address, its folder for the run, the proxy's round trip from there (ms)."""
    logs: dict[str, bytes] = field(default_factory=dict)
    """stdout / stderr tails of the harness."""


def node_dir(run_id: str) -> Path:
    """This node's folder for the run: the node's ray.node_dir setting /<run id>, else under the system's temporary
    folder."""
    from agentlightning_cli.config import load_settings

    root = load_settings().ray.node_dir or Path(tempfile.gettempdir()) / "alight-nodes"
    return Path(root).expanduser() / run_id


class ProxyCalls:
    """The call counter the runner needs, asked of the head's proxy; keeps the round trips it measured."""

    def __init__(self, proxy_url: str, key: str, settle_s: float = 0.1, max_wait_s: float = 5.0,
                 ask_timeout_s: float = 5.0, retries_s: tuple[float, ...] = (0.5, 1.0, 2.0)):
        self.proxy_url, self.key = proxy_url, key
        self.settle_s, self.max_wait_s = settle_s, max_wait_s
        self.ask_timeout_s, self.retries_s = ask_timeout_s, retries_s
        """Each ask's timeout, and the pauses before each ask again: a blip of ~20 s is ridden out."""
        self.round_trips_ms: list[float] = []

    def ask(self, episode_id: str) -> dict[str, Any]:
        from agentlightning_cli.proxy.server import CALLS_PATH

        request = urllib.request.Request(f"{self.proxy_url}/e/{episode_id}{CALLS_PATH}",
                                         headers={"Authorization": f"Bearer {self.key}"})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=self.ask_timeout_s) as answer:
            body = json.loads(answer.read())
        self.round_trips_ms.append((time.perf_counter() - started) * 1000)
        return body

    def read(self, episode_id: str) -> tuple[int, float | None]:
        """The count, asked again after each pause of retries_s; CallCountUnread when no ask was answered."""
        failures = []
        for pause in (*self.retries_s, None):
            try:
                body = self.ask(episode_id)
                return int(body["calls"]), body.get("first_call_at")
            except (OSError, ValueError, KeyError, TypeError) as exc:  # a timeout, a reset, a garbled answer
                failures.append(f"{type(exc).__name__}: {exc}")
            if pause is not None:
                time.sleep(pause)
        raise CallCountUnread(f"the call count was not read: the proxy at {self.proxy_url} did not answer "
                              f"{len(failures)} asks from this node (last: {failures[-1]})")

    def watch_budget(self, episode_id: str, stopper: Any, done: threading.Event, every_s: float = 1.0) -> None:
        """Until `done`: once the proxy has refused a call of the episode over its budget, stop its harness (as the
        proxy's own callback does on one machine)."""
        while not done.wait(every_s):
            try:
                why = self.ask(episode_id).get("over_budget")
            except (OSError, ValueError):
                continue  # the head is briefly unreachable: the next ask decides
            if why and episode_id in stopper.running:  # the harness has started: it hears the stop
                stopper(episode_id, why)
                return

    def __call__(self, episode_id: str) -> tuple[int, float | None]:
        """Re-read until the count stays the same for settle_s (a stream is recorded when it ends), as on one machine."""
        deadline = time.monotonic() + self.max_wait_s
        last = self.read(episode_id)
        while time.monotonic() < deadline:
            time.sleep(self.settle_s)
            now = self.read(episode_id)
            if now == last:
                break
            last = now
        return last


def access_for(job: NodeJob, sandboxed: bool) -> Any:
    """How the harness reaches the head's proxy from here (episode.ProxyAccess)."""
    from agentlightning_cli.proxy.server import episode_base_url
    from agentlightning_cli.rollout.episode import ProxyAccess

    url, protocol = urlsplit(job.proxy_url), job.settings.recipe.protocol
    if not sandboxed:
        return ProxyAccess(episode_base_url(job.proxy_url, job.slot.episode_id, protocol), job.key)
    # The sandbox's forwarder listens on its own loopback at the proxy's port and relays to the head.
    loopback = f"http://127.0.0.1:{url.port}"
    return ProxyAccess(episode_base_url(loopback, job.slot.episode_id, protocol), job.key,
                       proxy_remote=f"{url.hostname}:{url.port}")


def episode_task(job: NodeJob) -> Any:
    """The Ray task (a generator): where and when the episode started on this node, then its NodeResult."""
    import ray

    yield {"node_id": ray.get_runtime_context().get_node_id(), "address": ray.util.get_node_ip_address(),
           "pid": os.getpid(), "at": time.time()}
    yield run_on_node(job)


def run_on_node(job: NodeJob) -> NodeResult:
    """One episode, start to reward, on this node. Blocking."""
    import asyncio

    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.rollout import episode
    from agentlightning_cli.rollout.ship import localize
    from agentlightning_cli.rollout.sources import SourceCache

    started = time.monotonic()  # prepare_s: everything on the node before the harness (settings, checks, workspace)
    folder = node_dir(job.run_id)
    counter = ProxyCalls(job.proxy_url, job.key)
    plain = {f.name: getattr(job.settings, f.name) for f in fields(job.settings)}
    node = episode.NodeContext(**plain, run_dir=folder, sources=SourceCache(folder / "sources"), count_calls=counter)
    where = _where(folder)
    missing = _missing_harness(job)
    if missing is not None:  # the episode cannot start here: ended like a failed setup (no workspace, no reward)
        return _back(episode.setup_failed(missing), where)
    try:
        slot = Slot(localize(job.slot.task, job.shipments, folder / "shipped"), job.slot.attempt, job.slot.episode_id)
    except (AlightError, OSError) as exc:
        why = f"the task's files sent from the head could not be unpacked on node {_node_name(where)}: {exc}"
        return _back(episode.setup_failed(why), where)
    missing = _missing_source(slot.task, where)
    if missing is not None:
        return _back(episode.setup_failed(missing), where)
    try:
        workspace = episode.setup(node, slot)
    except episode.SetupFailed as exc:
        return _back(episode.setup_failed(exc.why), where)
    access = access_for(job, node.sandbox != "none")
    done = threading.Event()
    watcher = threading.Thread(target=counter.watch_budget, args=(job.slot.episode_id, node.stopper, done), daemon=True)
    if job.budgeted:
        watcher.start()
    try:
        result = asyncio.run(episode.work(node, slot, workspace, time.monotonic() - started, access))
    finally:
        done.set()
        if watcher.is_alive():
            watcher.join(5)
    if counter.round_trips_ms:
        trips = sorted(counter.round_trips_ms)
        where["proxy_round_trip_ms"] = round(trips[len(trips) // 2], 3)  # the median of this episode's asks
    return _back(result, where, _log_tails(folder, job.slot.episode_id))


def _back(result: Any, where: dict[str, Any], logs: dict[str, bytes] | None = None) -> NodeResult:
    """What goes back to the head; the stored episode keeps where it ran (outcome_detail.node)."""
    result.outcome_detail = {**(result.outcome_detail or {}), "node": where}
    return NodeResult(result, where, logs or {})


def _where(folder: Path) -> dict[str, Any]:
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "address": ray.util.get_node_ip_address(),
            "folder": str(folder), "pid": os.getpid()}


def _node_name(where: dict[str, Any]) -> str:
    return f"{where['node_id'][:8]} ({where['address']})"


def _missing_source(task: Any, where: dict[str, Any]) -> str | None:
    """A local path the task still names that this node does not have (a shipment normally stands in for each)."""
    paths = [("hidden_files", task.hidden_files)] if task.hidden_files is not None else []
    if task.repo_kind in ("dir", "git-dir"):
        paths.append(("repo", task.repo))
    for what, path in paths:
        if not Path(path).is_dir():
            return (f"task {task.id}: its {what} {path} does not exist on node {_node_name(where)}, so the episode "
                    "is not run there (without its hidden files a reward scores whatever the agent wrote)")
    return None


def remove_containers(run_id: str, runtime: str, episode_id: str | None = None) -> int:
    """On this node: the containers of the run's episodes (of one episode), whatever state they are in. A container
    outlives the Ray worker that started it (its runtime's monitor, not the worker, is its parent)."""
    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.sandbox.container import remove_under, runtime_path

    folder = node_dir(run_id) / "workspaces"
    try:
        return remove_under(runtime_path(runtime), folder / episode_id if episode_id else folder)
    except AlightError:  # no container runtime on this node: it ran no container
        return 0


def _missing_harness(job: NodeJob) -> str | None:
    installed, name = job.settings.installed, job.settings.recipe.name
    if installed.external or Path(installed.executable).exists():
        return None
    return (f"{name} is not installed on this node ({installed.executable} is missing): run `alight harness install "
            f"{name} --ray-address HEAD:PORT` (every node with episode slots), with the same ALIGHT_HOME")


def _log_tails(folder: Path, episode_id: str) -> dict[str, bytes]:
    tails = {}
    for name in ("stdout", "stderr"):
        path = folder / "logs" / "episodes" / f"{episode_id}.{name}"
        try:
            with open(path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - LOG_TAIL_BYTES))
                tails[name] = fh.read()
        except OSError:
            continue
    return tails
