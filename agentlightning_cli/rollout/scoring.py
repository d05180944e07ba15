"""A finished reward command -> (episode status, reward, error), with `reward_error` for scores we cannot trust.

The reward module turns exit codes and a final JSON line into numbers. Here the run decides what is a
failure of the scoring itself rather than of the agent: a command that ran past its limit, was killed by a
signal, could not be found or started (exit 126/127), or whose final line looks like a JSON report but is
not a valid one. Those get `reward_error` with their output stored, never a silent 0.
"""

from __future__ import annotations

import json
from typing import Any

NOT_RUNNABLE = (126, 127)  # bash: found but not executable / command not found


def classify(result: Any) -> tuple[str, float | None, str | None]:
    """(status, reward, error) for a RewardResult."""
    if result.error:
        return "reward_error", None, result.error
    if result.exit_code is None:
        return "reward_error", None, "the reward command did not exit"
    if result.exit_code < 0:
        return "reward_error", None, f"the reward command was killed by signal {-result.exit_code}"
    if result.exit_code in NOT_RUNNABLE:
        return "reward_error", None, f"the reward command could not run (exit {result.exit_code}): {_last(result)}"
    last = _last_line(result.stdout_tail)
    if last.startswith("{") and "reward" in last and not result.detail:
        try:
            json.loads(last)
        except ValueError:
            return "reward_error", None, f"the reward command's final line is not valid JSON: {last[:200]!r}"
        if not _is_report(last):
            return "reward_error", None, f"the reward command's final line has no usable reward: {last[:200]!r}"
    return "done", result.reward, None


def _is_report(line: str) -> bool:
    obj = json.loads(line)
    return isinstance(obj, dict) and "reward" in obj


def _last_line(text: str) -> str:
    return text.rstrip().rsplit("\n", 1)[-1].strip() if text.strip() else ""


def _last(result: Any) -> str:
    return (_last_line(result.stderr_tail) or _last_line(result.stdout_tail) or "(no output)")[:300]


def detail(result: Any) -> dict[str, Any]:
    """What is stored in reward_detail: the command's own report plus its exit code, time and output tails."""
    out = dict(result.detail)
    out.update(exit_code=result.exit_code, duration_s=result.duration_s,
               stdout_tail=result.stdout_tail[-2000:], stderr_tail=result.stderr_tail[-2000:])
    return out
