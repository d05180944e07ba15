"""One episode from a prepared workspace to a stored reward: register, run the harness, reveal, score, clean.

The head's side (`create`, `record`) holds the store and the proxy; the rest (`setup`, `work`) never touches
either, so an episode runs the same way here and on a Ray worker node (rollout/remote.py).
The episode row exists (and its key is registered with the proxy) before its harness starts. Hidden files
go in only after the harness has ended, when the runner has killed every process the episode started. The
reward command runs after every harness ending (finished, timeout, budget_exceeded, harness_error, no_calls)
alike; the outcome is stored beside it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.errors import AlightError
from agentlightning_cli.harness.env import EpisodeSpec
from agentlightning_cli.harness.runner import EpisodeStopper, run_episode, store_call_counter
from agentlightning_cli.proxy.control import slot_draw
from agentlightning_cli.reward import run_reward
from agentlightning_cli.rollout import harbor_episode, scoring, stale
from agentlightning_cli.rollout.plan import Slot
from agentlightning_cli.rollout.sources import SourceCache
from agentlightning_cli.tasks import (AgentPatch, agent_patch, patch_base_dir, prepare_workspace, remove_base,
                                      reveal_hidden_files, snapshot_base)
from agentlightning_cli.tasks.history import History
from agentlightning_cli.tasks.patch import GitFailed

HISTORY_RECORD = "alight-history.json"
"""In an episode's patch base (outside every sandbox): what its workspace's repository left out, from `setup`."""

if TYPE_CHECKING:
    from agentlightning_cli.harness.install import Installed
    from agentlightning_cli.harness.recipe import Recipe
    from agentlightning_cli.store import Store


class EpisodeProxy(Protocol):
    """What an episode needs of the recording proxy (proxy/server.Proxy): its key registered (with the run's seed)
    before the harness starts, the base URL the harness is pointed at, the Unix sockets a sandbox reaches, and its
    key revoked when it ends (`end_episode`: a process the harness left behind is refused, never recorded)."""

    unix_path: str
    listeners_path: str

    def register_episode(self, episode_id: str, key: str, seed: int | None = None,
                         draw: str | None = None) -> None: ...

    def end_episode(self, episode_id: str) -> None: ...

    def episode_base_url(self, episode_id: str, protocol: str = "openai-chat") -> str: ...


@dataclass
class EpisodeSettings:
    """How a run's episodes run, the same for each: plain values, picklable (a Ray node gets them in its NodeJob)."""

    recipe: Recipe
    installed: Installed
    sandbox: str
    """The sandbox every episode, setup and reward of the run uses ("bwrap", "container" or "none"), resolved once."""
    limits: EpisodeLimits
    """The sandbox's limits (the `episode_limits` setting), resolved once."""
    timeout_s: float | None = None
    max_turns: int | None = None
    setup_timeout_s: float = 900.0
    reward_timeout_s: float = 600.0
    keep_workspaces: bool = False
    container_runtime: str = "auto"
    """`sandbox: container`: podman, docker or auto (each task carries its image)."""
    grading_network: bool = True
    """`sandbox: container`: SWE-bench grading containers get the network, as the official ones do."""
    harbor: Any = None
    """config.HarborSettings (Harbor tasks' reward key, timeout multiplier, verifier network); None: defaults."""

    def episode_settings(self) -> EpisodeSettings:
        """Just these settings (of a NodeContext or RunContext), to send to another machine."""
        return EpisodeSettings(**{f.name: getattr(self, f.name) for f in fields(EpisodeSettings)})


@dataclass
class NodeContext(EpisodeSettings):
    """What the part of an episode that runs where its harness runs needs (workspace, harness, patch, reward):
    never the store or the proxy object, so the same code runs in `alight run` and on a Ray worker node
    (rollout/remote.py), which returns its Result to the head, the store's only writer."""

    run_dir: Path = field(kw_only=True)
    """Where workspaces, harness folders and logs go: the run directory, or a node's own folder for the run."""
    sources: SourceCache = field(kw_only=True)
    stopper: EpisodeStopper = field(default_factory=EpisodeStopper)
    count_calls: Callable[[str], tuple[int, float | None]] | None = None


@dataclass
class RunContext(NodeContext):
    """Everything the episodes of a run share, whatever their round: built once the run's proxy is up."""

    store: Store = field(kw_only=True)
    proxy: EpisodeProxy = field(kw_only=True)
    run_id: str = field(kw_only=True)
    seed: int | None = None
    """`alight run --seed`: each episode's chat calls get a vLLM seed from (seed, episode id, call index)."""
    paired_seeds: bool = False
    """`alight eval`: the seed hashes the (task, attempt) slot instead of the episode id (proxy/control.slot_draw),
    so each adapter evaluated draws alike on the same slot."""
    executor: Any = None
    """None: episodes run here (scheduler.run_slots); else a rollout.ray_executor.RayExecutor."""

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir).absolute()
        if self.count_calls is None:
            self.count_calls = store_call_counter(self.store)

    def for_round(self, round_id: str) -> RoundContext:
        """The context of one of the run's rounds (the same proxy, stopper and store)."""
        return RoundContext(**{f.name: getattr(self, f.name) for f in fields(RunContext)}, round_id=round_id)

    def node(self) -> NodeContext:
        """The episode side of this context, for episodes run on this machine."""
        return NodeContext(**{f.name: getattr(self, f.name) for f in fields(NodeContext)})


@dataclass
class RoundContext(RunContext):
    """A run's context for one round: its episodes are created and looked up under `round_id`."""

    round_id: str = field(kw_only=True)


@dataclass
class Ended:
    """How one episode ended, for the progress display."""

    slot: Slot
    status: str
    outcome: str | None = None
    reward: float | None = None
    calls: int = 0
    tokens: int = 0
    why: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class Prepared:
    slot: Slot
    key: str
    workspace: Path
    prep_s: float


@dataclass
class ProxyAccess:
    """How an episode's harness reaches the proxy: the base URL it is handed, its key, and what its sandbox uses."""

    base_url: str
    key: str
    proxy_socket: str | None = None
    proxy_listeners: str | None = None
    proxy_remote: str | None = None
    """host:port of a proxy on another machine, relayed to from the sandbox (base_url is then on loopback)."""


@dataclass
class Result:
    """Everything an episode's run decided, for the store (`record`): picklable, so a Ray node can return it."""

    status: str
    outcome: str | None = None
    reward: float | None = None
    reward_detail: dict | None = None
    outcome_detail: dict | None = None
    exit_code: int | None = None
    error: str | None = None
    why: str | None = None
    calls: int = 0
    patch: AgentPatch | None = None
    timings: dict[str, float] = field(default_factory=dict)


class SetupFailed(Exception):
    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def create(ctx: RoundContext, slot: Slot) -> str:
    """The episode row (pending) with a fresh random key, registered with the proxy. Blocking."""
    key = "ek-" + secrets.token_urlsafe(24)
    workspace = stale.workspaces_root(ctx.run_dir) / slot.episode_id
    ctx.store.create_episode(ctx.run_id, ctx.round_id, slot.task.id, slot.attempt, ctx.recipe.name, key,
                             workspace=str(workspace), episode_id=slot.episode_id)
    draw = slot_draw(slot.task.id, slot.attempt) if ctx.paired_seeds else None
    ctx.proxy.register_episode(slot.episode_id, key, seed=ctx.seed, draw=draw)
    return key


def setup(node: NodeContext, slot: Slot) -> Path:
    """The episode's workspace, made and recorded as the patch's starting point; SetupFailed (the command and its
    output) otherwise, with nothing left behind. Blocking; no store."""
    workspace = stale.workspaces_root(node.run_dir) / slot.episode_id
    try:
        task = node.sources.local_task(slot.task)
        found: list[History] = []
        # A repository's later history is left out (tasks/history.py), made once per (source, commit) per run.
        prepare_workspace(task, workspace, setup_timeout_s=node.setup_timeout_s, sandbox=node.sandbox,
                          limits=node.limits, container_runtime=node.container_runtime,
                          history_cache=node.sources.root / "history", on_history=found.append)
        # The starting point of the agent's patch: the workspace after setup, kept where no sandbox mounts it.
        base = patch_base_dir(node.run_dir, slot.episode_id)
        snapshot_base(workspace, base)
        if found:  # beside the starting point, for the episode's record (`work` reads it)
            (base / HISTORY_RECORD).write_text(json.dumps(found[0].to_json()), encoding="utf-8")
    except (AlightError, OSError, subprocess.SubprocessError, GitFailed) as exc:
        shutil.rmtree(workspace, ignore_errors=True)
        remove_base(patch_base_dir(node.run_dir, slot.episode_id))
        if not isinstance(exc, AlightError):
            exc = AlightError(f"task {slot.task.id}: the workspace's starting point could not be recorded: {exc}")
        raise SetupFailed(exc.message + (f" ({exc.hint})" if exc.hint else "")) from None
    return workspace


def prepare(ctx: RoundContext, slot: Slot, key: str) -> Prepared | Ended:
    """The workspace, or an `setup_failed` ending (stored) naming the command and its output. Blocking."""
    started = time.monotonic()
    try:
        workspace = setup(ctx.node(), slot)
    except SetupFailed as exc:
        ctx.proxy.end_episode(slot.episode_id)
        record(ctx.store, slot.episode_id, setup_failed(exc.why))
        return Ended(slot, "setup_failed", why=exc.why.splitlines()[0])
    return Prepared(slot, key, workspace, time.monotonic() - started)


def setup_failed(why: str) -> Result:
    return Result("setup_failed", error=why, why=why.splitlines()[0])


async def run(ctx: RoundContext, item: Prepared) -> Ended:
    """Harness, hidden files, reward, store, cleanup. Cancelling it kills the harness (the runner's finally)."""
    slot = item.slot
    access = ProxyAccess(ctx.proxy.episode_base_url(slot.episode_id, ctx.recipe.protocol), item.key,
                         proxy_socket=ctx.proxy.unix_path or None,  # sandboxed episodes reach the proxy through these
                         proxy_listeners=ctx.proxy.listeners_path or None)
    await asyncio.to_thread(ctx.store.update_episode, slot.episode_id, status="running", started_at=time.time())
    try:
        result = await work(ctx.node(), slot, item.workspace, item.prep_s, access,
                            harness_ended=lambda: ctx.proxy.end_episode(slot.episode_id))
    finally:  # cancelled too: the key stops working whatever way the episode ends
        ctx.proxy.end_episode(slot.episode_id)
    await asyncio.to_thread(record, ctx.store, slot.episode_id, result)
    return await ended(ctx.store, slot, result)


async def ended(store: Store, slot: Slot, result: Result) -> Ended:
    """The progress line's view of a recorded episode (its completion tokens from the calls' summary index)."""
    tokens = await asyncio.to_thread(_completion_tokens, store, slot.episode_id) if result.calls else 0
    return Ended(slot, result.status, result.outcome, result.reward, result.calls, tokens, result.why, result.timings)


def record(store: Store, episode_id: str, result: Result) -> None:
    """The head's side: the episode's patch and ending into the store."""
    if result.patch is not None:
        made = result.patch
        store.set_patch(episode_id, made.patch, made.files, made.size, made.error)
    if result.status == "setup_failed":
        store.update_episode(episode_id, status="setup_failed", error=result.error, ended_at=time.time(),
                             workspace=None, outcome_detail=result.outcome_detail)
        return
    store.update_episode(episode_id, status=result.status, reward=result.reward, reward_detail=result.reward_detail,
                         outcome=result.outcome, outcome_detail=result.outcome_detail, exit_code=result.exit_code,
                         ended_at=time.time(), error=result.error)


async def work(node: NodeContext, slot: Slot, workspace: Path, prep_s: float, access: ProxyAccess,
               harness_ended: Callable[[], None] | None = None) -> Result:
    """The harness in its sandbox, then the agent's patch, hidden files and reward, then the workspace removed.
    No store: the caller records the Result. Cancelling it kills the harness (the runner's finally).
    `harness_ended`: called once the harness has ended (and its calls are counted), before the hidden files go in
    and the reward runs: the head revokes the episode's key there, so nothing started by the episode can still
    call the model (or be recorded) while it is scored."""
    timings, t0 = {"prepare_s": prep_s}, time.monotonic()
    harbor = slot.task.harbor is not None and node.sandbox == "container"
    if harbor and harbor_episode.is_oracle(node.recipe):  # no model, no harness process: solve.sh, then test.sh
        ending, reason, exit_code, graded = await asyncio.to_thread(harbor_episode.oracle, node, slot, timings)
        if harness_ended is not None:
            harness_ended()
        return await asyncio.to_thread(_ended, node, slot, workspace, t0, timings, ending, reason, exit_code, 0,
                                       None, None, graded)
    fs = None
    spec = EpisodeSpec(
        episode_id=slot.episode_id, prompt=slot.task.prompt, workspace=workspace, base_url=access.base_url,
        api_key=access.key, run_dir=node.run_dir, max_turns=node.max_turns,
        timeout_s=harbor_episode.agent_timeout(node, slot.task) if harbor else node.timeout_s or slot.task.timeout_s,
        proxy_socket=access.proxy_socket, proxy_listeners=access.proxy_listeners, proxy_remote=access.proxy_remote,
        sandbox=node.sandbox, limits=harbor_episode.limits_for(node.limits, slot.task) if harbor else node.limits,
        image=slot.task.image, container_runtime=node.container_runtime,
        container_workdir=slot.task.container_workdir)
    t = time.monotonic()
    seen: dict[str, Any] | None = None
    history = _history_record(patch_base_dir(node.run_dir, slot.episode_id))
    assert node.count_calls is not None
    try:
        if harbor:  # the harness works in the image's own file system, kept for the verifier
            spec.task_fs = fs = harbor_episode.task_fs(node, slot.episode_id, slot.task)
        outcome = await run_episode(node.recipe, node.installed, spec, node.count_calls, node.stopper)
        ending, reason, exit_code, calls = outcome.status, outcome.reason, outcome.exit_code, outcome.calls or 0
        seen = outcome.detail  # the sandbox it ran in, its peak use, leftovers killed: kept with the episode
        timings["harness_own_s"] = outcome.wall_s  # the harness process's own lifetime
    except (AlightError, OSError, ValueError) as exc:  # a harness that cannot start fails its episode only
        ending, reason, exit_code, calls = "harness_error", f"the harness could not start: {exc}", None, 0
    timings["harness_s"] = time.monotonic() - t
    if history is not None:  # what the workspace's repository left out: the round's summary counts it
        seen = {**(seen or {}), "history": history}
    if harness_ended is not None:
        harness_ended()
    if harbor:
        graded = await asyncio.to_thread(harbor_episode.grade, node, slot, fs, timings)
        return await asyncio.to_thread(_ended, node, slot, workspace, t0, timings, ending, reason, exit_code,
                                       calls, seen, None, graded)
    made, graded = await asyncio.to_thread(_score, node, slot, workspace, timings)
    return await asyncio.to_thread(_ended, node, slot, workspace, t0, timings, ending, reason, exit_code, calls,
                                   seen, made, graded)


def _ended(node: NodeContext, slot: Slot, workspace: Path, t0: float, timings: dict[str, float], ending: str,
           reason: str | None, exit_code: int | None, calls: int, seen: dict[str, Any] | None,
           made: AgentPatch | None, graded: tuple[str, float | None, str | None, dict]) -> Result:
    """The episode's Result once it is scored; its workspace removed (unless kept)."""
    status, reward, error, detail = graded
    if not node.keep_workspaces:
        shutil.rmtree(workspace, True)
    if made is None:  # a Harbor task: the agent worked in its container, not the workspace; nothing to diff
        remove_base(patch_base_dir(node.run_dir, slot.episode_id))
    timings["run_s"] = time.monotonic() - t0
    return Result(status, ending, reward, detail, seen, exit_code, error=error or (reason if ending != "finished" else None),
                  why=error or reason, calls=calls, patch=made, timings=timings)


def _score(node: NodeContext, slot: Slot, workspace: Path,
           timings: dict[str, float]) -> tuple[AgentPatch, tuple[str, float | None, str | None, dict]]:
    """Keep the agent's patch, reveal the hidden files and run the reward command (all after every process of the
    episode is gone)."""
    base = patch_base_dir(node.run_dir, slot.episode_id)
    t = time.monotonic()
    made = agent_patch(workspace, base)
    remove_base(base)
    timings["patch_s"] = time.monotonic() - t
    task = slot.task
    if node.sandbox == "container" and task.swebench is not None and task.swebench.gradable:
        # The official verdict on the patch alone, in a fresh container of the instance's image.
        from agentlightning_cli.sandbox.container import runtime_path
        from agentlightning_cli.swebench_grade import grade

        if made.error is not None:
            return made, ("reward_error", None, made.error, {"error": made.error})
        result = grade(task, made.patch, runtime=runtime_path(node.container_runtime), network=node.grading_network,
                       timeout_s=node.reward_timeout_s)
        timings["reward_s"] = result.duration_s
        return made, (*scoring.classify(result), scoring.detail(result))
    try:
        # The source-cache copy of the task (already fetched for its workspace): a SWE-bench reveal reads the
        # base test files from there, never from the workspace's .git, which the agent had.
        reveal_hidden_files(node.sources.local_task(slot.task), workspace)
    except (AlightError, OSError) as exc:
        why = f"hidden files could not be revealed: {getattr(exc, 'message', exc)}"
        return made, ("reward_error", None, why, {"error": why})
    result = run_reward(slot.task, workspace, timeout_s=node.reward_timeout_s, sandbox=node.sandbox, limits=node.limits,
                        container_runtime=node.container_runtime)
    timings["reward_s"] = result.duration_s
    return made, (*scoring.classify(result), scoring.detail(result))


def _history_record(base: Path) -> dict | None:
    try:
        return json.loads((base / HISTORY_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _completion_tokens(store: Store, episode_id: str) -> int:
    """From the calls' summary index: no call body is read."""
    return sum(s.completion_tokens for s in store.episode_summaries_by_id([episode_id]))
