"""Round control: pause/resume gate, in-flight tracking for drain(), per-episode budgets, the model policy."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
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
        if self.on_exceeded is not None:
            try:
                self.on_exceeded(episode_id, reason)
            except Exception:  # noqa: BLE001 - the owner's callback must not break the proxy
                log.exception("on_budget_exceeded callback failed")

    def add_tokens(self, episode_id: str, completion_tokens: int) -> None:
        self.usage.setdefault(episode_id, Usage()).completion_tokens += completion_tokens


@dataclass
class ModelPolicy:
    """Which upstream model a request goes to: the current policy (switched between rounds), the configured
    aliases, and the sampling overrides. Requests read `name` once, after the pause gate, so none sees a mix."""

    name: str | None
    aliases: dict[str, str]
    sampling: SamplingOverrides

    def upstream_model(self, client_model: str | None) -> str | None:
        return resolve_model(client_model, self.aliases, self.name)

    def advertised(self) -> list[str]:
        """Model names `GET /v1/models` lists: the aliases without wildcards, then the policy."""
        names = [name for name in self.aliases if "*" not in name]
        if self.name is not None and self.name not in names:
            names.append(self.name)
        return names or ["default"]
