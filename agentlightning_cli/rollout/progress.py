"""Live progress on stderr: a Rich live line on a terminal, one plain line per finished episode otherwise.

Shows episodes done / running / queued, the mean reward so far, calls and completion tokens per second, and
failures by kind (any status other than done, any outcome other than finished).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any, TextIO


class Progress:
    def __init__(self, total: int, already_done: int = 0, stream: TextIO | None = None, live: bool | None = None):
        self.stream = stream or sys.stderr
        self.total, self.done = total, already_done
        self.running = 0
        self.rewards: list[float] = []
        self.calls = 0
        self.tokens = 0
        self.failures: Counter[str] = Counter()
        self.started = time.monotonic()
        self.live_display = self.stream.isatty() if live is None else live
        self._live: Any = None

    # lifecycle --------------------------------------------------------------------------------------------
    def __enter__(self) -> "Progress":
        if self.live_display:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self.line(), console=Console(file=self.stream), refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self.line())
            self._live.__exit__(None, None, None)
            self._live = None

    # events ------------------------------------------------------------------------------------------------
    def started_one(self) -> None:
        self.running += 1
        self._refresh()

    def finished_one(self, episode_id: str, task_id: str, attempt: int, status: str, outcome: str | None,
                     reward: float | None, calls: int, tokens: int, why: str | None = None) -> None:
        self.running = max(0, self.running - 1)
        self.done += 1
        self.calls += calls
        self.tokens += tokens
        if reward is not None:
            self.rewards.append(reward)
        if status != "done":
            self.failures[status] += 1
        elif outcome and outcome != "finished":
            self.failures[outcome] += 1
        if self._live is None:
            text = f"[{self.done}/{self.total}] {task_id}#{attempt} {episode_id}: {status}"
            text += f" ({outcome})" if outcome else ""
            text += f" reward {reward:g}" if reward is not None else ""
            text += f" calls {calls}"
            text += f" - {why}" if why and status != "done" else ""
            print(text, file=self.stream, flush=True)
        self._refresh()

    def message(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text)
        else:
            print(text, file=self.stream, flush=True)

    # rendering ---------------------------------------------------------------------------------------------
    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        queued = max(0, self.total - self.done - self.running)
        mean = f"{sum(self.rewards) / len(self.rewards):.2f}" if self.rewards else "-"
        text = (f"episodes {self.done}/{self.total} done, {self.running} running, {queued} queued | "
                f"mean reward {mean} | calls {self.calls} | {self.tokens / elapsed:.1f} tok/s")
        if self.failures:
            text += " | " + ", ".join(f"{k} {v}" for k, v in sorted(self.failures.items()))
        return text

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self.line())
