"""95% confidence intervals clustered by task: a percentile bootstrap that resamples tasks, not attempts.

The attempts of one task are not independent draws (the same task is easy or hard for every attempt), so an
interval that resamples attempts is too narrow by up to sqrt(attempts). Here each task is one unit: its value
(pass@1, pass@k or mean reward over all its attempts) is computed once, tasks are drawn with replacement, and the
statistic is the mean over the drawn tasks. A paired comparison (two adapters on the same tasks and the same
sampling seeds) resamples tasks once for both: the interval of the mean of per-task differences, which is the
difference of the means. The bootstrap's own seed is fixed, so the same results print the same interval.
Pure Python: no numpy, nothing heavy to import.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any, Sequence

RESAMPLES = 2000
"""Bootstrap resamples (of tasks) per interval."""
SEED = 0
"""The bootstrap's random seed: fixed, so an interval is reproducible from the same per-task values."""
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    estimate: float
    """The statistic on the tasks as they are (the mean over tasks of the per-task value)."""
    low: float
    high: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, digits: int = 3) -> str:
        return f"{self.estimate:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default), on an ascending list."""
    pos = q * (len(ordered) - 1)
    below = int(pos)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (pos - below)


def task_interval(per_task: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED,
                  level: float = LEVEL) -> Interval | None:
    """The mean over tasks of `per_task` (one value per task, from all its attempts) and its percentile bootstrap
    interval, tasks resampled with replacement. None when there is no task."""
    values = [float(v) for v in per_task]
    if not values:
        return None
    n = len(values)
    estimate = sum(values) / n
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2
    return Interval(estimate, _quantile(means, tail), _quantile(means, 1.0 - tail))


def paired_interval(first: Sequence[float], second: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED,
                    level: float = LEVEL) -> Interval | None:
    """second - first, task by task (both lists in the same task order): the difference of the means and its
    interval, the same tasks drawn for both arms in every resample."""
    if len(first) != len(second):
        raise ValueError(f"paired values need the same tasks: {len(first)} against {len(second)}")
    return task_interval([b - a for a, b in zip(first, second)], resamples, seed, level)
