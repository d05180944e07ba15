"""Round control: pause/resume gate, in-flight tracking for drain(), per-episode budgets."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any


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

    def __init__(self, settings: Any):
        self.max_calls = settings.max_calls
        self.max_completion_tokens = settings.max_completion_tokens
        self.usage: dict[str, Usage] = {}

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

    def add_tokens(self, episode_id: str, completion_tokens: int) -> None:
        self.usage.setdefault(episode_id, Usage()).completion_tokens += completion_tokens
