"""Round control: pause/resume gate, in-flight tracking for drain(), per-episode budgets and sampling seeds,
the model policy."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Callable

from agentlightning_cli.config import Budgets as BudgetSettings
from agentlightning_cli.config import SamplingOverrides
from agentlightning_cli.proxy.chat import resolve_model

log = logging.getLogger("alight.proxy")


class Gate:
    """Requests wait at the gate while paused; drain() waits for those already past it."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.in_flight = 0

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def pause(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def enter(self) -> None:
        if not self._open.is_set():
            await self._open.wait()
        self.in_flight += 1
        self._idle.clear()

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    async def drain(self) -> None:
        await self._idle.wait()


@dataclass
class Usage:
    calls: int = 0
    completion_tokens: int = 0


class Budgets:
    """Counts calls and completion tokens per episode; a call is refused once a limit is reached."""

    def __init__(self, settings: BudgetSettings):
        self.max_calls = settings.max_calls
        self.max_completion_tokens = settings.max_completion_tokens
        self.usage: dict[str, Usage] = {}
        self.on_exceeded: Callable[[str, str], None] | None = None
        """Told (episode id, reason) when a call is refused, e.g. to stop that episode's harness."""
        self.refusals: dict[str, str] = {}
        """Episode id -> why its last call was refused: asked by runners on other machines (rollout/remote.py)."""

    def check(self, episode_id: str) -> str | None:
        """Reserve one call; returns the reason when the episode is over budget (nothing reserved)."""
        used = self.usage.setdefault(episode_id, Usage())
        if self.max_calls is not None and used.calls >= self.max_calls:
            return f"call budget exhausted ({used.calls} of {self.max_calls} calls used)"
        if self.max_completion_tokens is not None and used.completion_tokens >= self.max_completion_tokens:
            return (f"completion-token budget exhausted ({used.completion_tokens} of "
                    f"{self.max_completion_tokens} tokens used)")
        used.calls += 1
        return None

    def refused(self, episode_id: str, reason: str) -> None:
        self.refusals[episode_id] = reason
        if self.on_exceeded is not None:
            try:
                self.on_exceeded(episode_id, reason)
            except Exception:  # noqa: BLE001 - the owner's callback must not break the proxy
                log.exception("on_budget_exceeded callback failed")

    def tokens_left(self, episode_id: str) -> int | None:
        """Completion tokens the episode may still use (None: no token budget): each call's max_tokens is clamped to
        it when the call starts, so one long reply cannot run past the budget. Calls of one episode that run at
        once each get what was left when they started."""
        if self.max_completion_tokens is None:
            return None
        used = self.usage.get(episode_id)
        return self.max_completion_tokens - (used.completion_tokens if used else 0)

    def add_tokens(self, episode_id: str, completion_tokens: int) -> None:
        self.usage.setdefault(episode_id, Usage()).completion_tokens += completion_tokens


SEED_MASK = 0x7FFFFFFF
"""Seeds stay in 0 .. 2**31-1: vLLM takes any 64-bit value, other OpenAI-compatible servers may take 32 bits."""


def episode_seed(run_seed: int, episode_id: str, call_index: int) -> int:
    """The vLLM `seed` of one chat call: a hash of (run seed, episode id, call index). Different attempts of
    a task (different episode ids) sample differently, so GRPO groups do not collapse; the same episode
    rerun with the same run seed sends the same seeds, call by call. `episode_id` may instead be a slot's draw
    (slot_draw): then every run, round and retry of that (task, attempt) draws alike (alight eval's pairing)."""
    digest = hashlib.blake2b(f"{run_seed}\0{episode_id}\0{call_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & SEED_MASK


def slot_draw(task_id: str, attempt: int) -> str:
    """What a paired run's seeds hash in place of the episode id: the (task, attempt) slot alone. An episode id
    also holds the run id (random per run), the round and the retry, so two runs of the same slot never drew
    alike; keyed by the slot, two adapters evaluated in two runs send the same seeds, call by call."""
    return f"slot\0{task_id}\0{attempt}"


class EpisodeSeeds:
    """Per-episode sampling seeds for a seeded run (`alight run --seed`). An episode registered without a
    seed gets none: its requests go upstream unchanged. Call indices count, from 0, the chat calls of the
    episode that passed its budget in this proxy, in the order they arrived."""

    __slots__ = ("_run_seed", "_next", "_draw")

    def __init__(self) -> None:
        self._run_seed: dict[str, int] = {}
        self._next: dict[str, int] = {}
        self._draw: dict[str, str] = {}

    def register(self, episode_id: str, run_seed: int | None, draw: str | None = None) -> None:
        """`draw` (slot_draw): hashed in place of the episode id, so the seeds depend on the slot only."""
        if run_seed is None:
            self._run_seed.pop(episode_id, None)
        else:
            self._run_seed[episode_id] = run_seed
        if draw is None or run_seed is None:
            self._draw.pop(episode_id, None)
        else:
            self._draw[episode_id] = draw
        self._next.pop(episode_id, None)

    def next(self, episode_id: str) -> int | None:
        """The seed for this episode's next call (None: the episode is not seeded). One dict lookup when not."""
        run_seed = self._run_seed.get(episode_id)
        if run_seed is None:
            return None
        index = self._next.get(episode_id, 0)
        self._next[episode_id] = index + 1
        return episode_seed(run_seed, self._draw.get(episode_id, episode_id), index)


@dataclass
class ModelPolicy:
    """Which upstream model a request goes to: the current policy (switched between rounds), the configured
    aliases, the sampling overrides and the per-episode seeds. Requests read `name` once, after the pause gate,
    so none sees a mix."""

    name: str | None
    aliases: dict[str, str]
    sampling: SamplingOverrides
    seeds: EpisodeSeeds = field(default_factory=EpisodeSeeds)

    def upstream_model(self, client_model: str | None) -> str | None:
        return resolve_model(client_model, self.aliases, self.name)

    def advertised(self) -> list[str]:
        """Model names `GET /v1/models` lists: the aliases without wildcards, then the policy."""
        names = [name for name in self.aliases if "*" not in name]
        if self.name is not None and self.name not in names:
            names.append(self.name)
        return names or ["default"]
