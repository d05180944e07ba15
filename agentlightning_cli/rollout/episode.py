"""One episode from a prepared workspace to a stored reward: register, run the harness, reveal, score, clean.

The episode row exists (and its key is registered with the proxy) before its harness starts. Hidden files
go in only after the harness has ended, when the runner has killed every process the episode started. The
reward command runs after every harness ending (finished, timeout, budget_exceeded, harness_error, no_calls)
alike; the outcome is stored beside it.
"""

from __future__ import annotations

import asyncio
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
from agentlightning_cli.reward import run_reward
from agentlightning_cli.rollout import scoring, stale
from agentlightning_cli.rollout.plan import Slot
from agentlightning_cli.rollout.sources import SourceCache
from agentlightning_cli.tasks import (agent_patch, patch_base_dir, prepare_workspace, remove_base, reveal_hidden_files,
                                      snapshot_base)

if TYPE_CHECKING:
    from agentlightning_cli.harness.install import Installed
    from agentlightning_cli.harness.recipe import Recipe
    from agentlightning_cli.store import Store


class EpisodeProxy(Protocol):
    """What an episode needs of the recording proxy (proxy/server.Proxy): its key registered (with the run's seed)
    before the harness starts, the base URL the harness is pointed at, and the Unix sockets a sandbox reaches."""

    unix_path: str
    listeners_path: str

    def register_episode(self, episode_id: str, key: str, seed: int | None = None) -> None: ...

    def episode_base_url(self, episode_id: str, protocol: str = "openai-chat") -> str: ...


@dataclass
class RunContext:
    """Everything the episodes of a run share, whatever their round: built once the run's proxy is up."""

    store: Store
    proxy: EpisodeProxy
    recipe: Recipe
    installed: Installed
    run_id: str
    run_dir: Path
    sources: SourceCache
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
    seed: int | None = None
    """`alight run --seed`: each episode's chat calls get a vLLM seed from (seed, episode id, call index)."""
    stopper: EpisodeStopper = field(default_factory=EpisodeStopper)
    count_calls: Callable[[str], tuple[int, float | None]] | None = None

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir).absolute()
        if self.count_calls is None:
            self.count_calls = store_call_counter(self.store)

    def for_round(self, round_id: str) -> RoundContext:
        """The context of one of the run's rounds (the same proxy, stopper and store)."""
        return RoundContext(**{f.name: getattr(self, f.name) for f in fields(RunContext)}, round_id=round_id)


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


def create(ctx: RoundContext, slot: Slot) -> str:
    """The episode row (pending) with a fresh random key, registered with the proxy. Blocking."""
    key = "ek-" + secrets.token_urlsafe(24)
    workspace = stale.workspaces_root(ctx.run_dir) / slot.episode_id
    ctx.store.create_episode(ctx.run_id, ctx.round_id, slot.task.id, slot.attempt, ctx.recipe.name, key,
                             workspace=str(workspace), episode_id=slot.episode_id)
    ctx.proxy.register_episode(slot.episode_id, key, seed=ctx.seed)
    return key


def prepare(ctx: RoundContext, slot: Slot, key: str) -> Prepared | Ended:
    """The workspace, or an `setup_failed` ending (stored) naming the command and its output. Blocking."""
    started = time.monotonic()
    workspace = stale.workspaces_root(ctx.run_dir) / slot.episode_id
    try:
        task = ctx.sources.local_task(slot.task)
        prepare_workspace(task, workspace, setup_timeout_s=ctx.setup_timeout_s, sandbox=ctx.sandbox, limits=ctx.limits,
                          container_runtime=ctx.container_runtime)
        # The starting point of the agent's patch: the workspace after setup, kept where no sandbox mounts it.
        snapshot_base(workspace, patch_base_dir(ctx.run_dir, slot.episode_id))
    except (AlightError, OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(workspace, ignore_errors=True)
        remove_base(patch_base_dir(ctx.run_dir, slot.episode_id))
        if not isinstance(exc, AlightError):
            exc = AlightError(f"task {slot.task.id}: the workspace's starting point could not be recorded: {exc}")
        why = exc.message + (f" ({exc.hint})" if exc.hint else "")
        ctx.store.update_episode(slot.episode_id, status="setup_failed", error=why, ended_at=time.time(), workspace=None)
        return Ended(slot, "setup_failed", why=why.splitlines()[0])
    return Prepared(slot, key, workspace, time.monotonic() - started)


async def run(ctx: RoundContext, item: Prepared) -> Ended:
    """Harness, hidden files, reward, store, cleanup. Cancelling it kills the harness (the runner's finally)."""
    slot, timings, t0 = item.slot, {"prepare_s": item.prep_s}, time.monotonic()
    spec = EpisodeSpec(
        episode_id=slot.episode_id, prompt=slot.task.prompt, workspace=item.workspace,
        base_url=ctx.proxy.episode_base_url(slot.episode_id, ctx.recipe.protocol), api_key=item.key,
        run_dir=ctx.run_dir, max_turns=ctx.max_turns, timeout_s=ctx.timeout_s or slot.task.timeout_s,
        proxy_socket=ctx.proxy.unix_path or None,  # sandboxed episodes reach the proxy through these
        proxy_listeners=ctx.proxy.listeners_path or None,
        sandbox=ctx.sandbox, limits=ctx.limits, image=slot.task.image, container_runtime=ctx.container_runtime,
        container_workdir=slot.task.container_workdir)
    await asyncio.to_thread(ctx.store.update_episode, slot.episode_id, status="running", started_at=time.time())
    t = time.monotonic()
    seen: dict[str, Any] | None = None
    try:
        outcome = await run_episode(ctx.recipe, ctx.installed, spec, ctx.count_calls, ctx.stopper)
        ending, reason, exit_code, calls = outcome.status, outcome.reason, outcome.exit_code, outcome.calls
        seen = outcome.detail  # the sandbox it ran in, its peak use, leftovers killed: kept with the episode
        timings["harness_own_s"] = outcome.wall_s  # the harness process's own lifetime
    except (AlightError, OSError, ValueError) as exc:  # a harness that cannot start fails its episode only
        ending, reason, exit_code, calls = "harness_error", f"the harness could not start: {exc}", None, 0
    timings["harness_s"] = time.monotonic() - t
    status, reward, error, detail = await asyncio.to_thread(_score, ctx, slot, item.workspace, timings)
    fields = dict(status=status, reward=reward, reward_detail=detail, outcome=ending, outcome_detail=seen, exit_code=exit_code,
                  ended_at=time.time(), error=error or (reason if ending != "finished" else None))
    await asyncio.to_thread(ctx.store.update_episode, slot.episode_id, **fields)
    tokens = await asyncio.to_thread(_completion_tokens, ctx.store, slot.episode_id)
    if not ctx.keep_workspaces:
        await asyncio.to_thread(shutil.rmtree, item.workspace, True)
    timings["run_s"] = time.monotonic() - t0
    return Ended(slot, status, ending, reward, calls, tokens, error or reason, timings)


def _score(ctx: RoundContext, slot: Slot, workspace: Path, timings: dict[str, float]) -> tuple[str, float | None, str | None, dict]:
    """Keep the agent's patch, reveal the hidden files and run the reward command (all after every process of the
    episode is gone)."""
    base = patch_base_dir(ctx.run_dir, slot.episode_id)
    t = time.monotonic()
    made = agent_patch(workspace, base)
    remove_base(base)
    ctx.store.set_patch(slot.episode_id, made.patch, made.files, made.size, made.error)
    timings["patch_s"] = time.monotonic() - t
    task = slot.task
    if ctx.sandbox == "container" and task.swebench is not None and task.swebench.gradable:
        # The official verdict on the patch alone, in a fresh container of the instance's image.
        from agentlightning_cli.sandbox.container import runtime_path
        from agentlightning_cli.swebench_grade import grade

        if made.error is not None:
            return "reward_error", None, made.error, {"error": made.error}
        result = grade(task, made.patch, runtime=runtime_path(ctx.container_runtime), network=ctx.grading_network,
                       timeout_s=ctx.reward_timeout_s)
        timings["reward_s"] = result.duration_s
        status, reward, error = scoring.classify(result)
        return status, reward, error, scoring.detail(result)
    try:
        # The source-cache copy of the task (already fetched for its workspace): a SWE-bench reveal reads the
        # base test files from there, never from the workspace's .git, which the agent had.
        reveal_hidden_files(ctx.sources.local_task(slot.task), workspace)
    except (AlightError, OSError) as exc:
        why = f"hidden files could not be revealed: {getattr(exc, 'message', exc)}"
        return "reward_error", None, why, {"error": why}
    result = run_reward(slot.task, workspace, timeout_s=ctx.reward_timeout_s, sandbox=ctx.sandbox, limits=ctx.limits,
                        container_runtime=ctx.container_runtime)
    timings["reward_s"] = result.duration_s
    status, reward, error = scoring.classify(result)
    return status, reward, error, scoring.detail(result)


def _completion_tokens(store: Store, episode_id: str) -> int:
    """From the calls' summary index: no call body is read."""
    return sum(s.completion_tokens for s in store.episode_summaries_by_id([episode_id]))
