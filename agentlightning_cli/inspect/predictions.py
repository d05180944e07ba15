"""SWE-bench predictions out of a run: one JSONL line per episode, `{"instance_id", "model_name_or_path",
"model_patch"}`, the file SWE-bench's own harness grades (`python -m swebench.harness.run_evaluation
--predictions_path FILE`), so a run can be graded by the official code on another machine.

The patch is the one stored for the episode (store/patches.py: the agent's changes against the workspace it was
given). SWE-bench keys predictions by instance id, so two episodes of one task (attempts, rounds) cannot share a
file: that is refused with the way to pick one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import IO

from agentlightning_cli.errors import AlightError
from agentlightning_cli.inspect.export import dumps
from agentlightning_cli.inspect.source import RunSource
from agentlightning_cli.store import EpisodeSummary

NOT_ENDED = ("pending", "running")


@dataclass
class Written:
    lines: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    """Episodes left out, by why: no patch recorded, the patch not kept (its error), not ended."""
    replaced: int = 0
    """Patches whose bytes were not UTF-8 (written with U+FFFD where a byte did not decode)."""


def write_predictions(source: RunSource, episodes: list[EpisodeSummary], out: IO[bytes],
                      model_name: str | None = None) -> Written:
    twice = [task for task, n in Counter(s.episode.task_id for s in episodes).items() if n > 1]
    if twice:
        rounds = sorted({s.round_index for s in episodes if s.round_index is not None})
        attempts = sorted({s.episode.attempt for s in episodes})
        raise AlightError(
            f"{len(twice)} task(s) have more than one episode here (e.g. {twice[0]}: rounds {rounds}, attempts "
            f"{attempts}); SWE-bench keeps one prediction per instance id",
            "pick one with --round R --attempt A (one file per attempt grades each attempt)")
    written = Written()
    for s in episodes:
        why = _left_out(source, s)
        if why is not None:
            written.skipped[why] = written.skipped.get(why, 0) + 1
            continue
        stored = source.store.get_patch(s.episode.id)
        assert stored is not None and stored.patch is not None
        try:
            text = stored.patch.decode("utf-8")
        except UnicodeDecodeError:
            text = stored.patch.decode("utf-8", errors="replace")
            written.replaced += 1
        name = model_name or f"alight/{source.run_name(s.episode.run_id)}"
        out.write(dumps({"instance_id": s.episode.task_id, "model_name_or_path": name, "model_patch": text}) + b"\n")
        written.lines += 1
    return written


def _left_out(source: RunSource, s: EpisodeSummary) -> str | None:
    if s.episode.status in NOT_ENDED:
        return f"not ended ({s.episode.status})"
    stored = source.store.get_patch(s.episode.id)
    if stored is None:
        return "no patch recorded"
    if stored.patch is None:
        return "patch not kept" + (f" ({stored.error.split(':')[0]})" if stored.error else "")
    return None
