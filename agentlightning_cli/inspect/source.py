"""Which run directory `alight inspect [RUN]` means, and a store opened on it.

RUN is a run name (a folder under `runs_dir`), or the path of a run directory or of its alight.db. Without RUN
the most recently written run is used. One directory holds one store; it usually has one run row (`alight run`,
`alight serve --run`), or none at all for `alight proxy --store DIR`, whose episodes belong to no run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from agentlightning_cli.errors import AlightError
from agentlightning_cli.store import DB_NAME, Run, Store


def run_dirs(runs_dir: Path) -> list[Path]:
    """Every run directory under `runs_dir` (folders holding an alight.db), most recently written first."""
    if not runs_dir.is_dir():
        return []
    found = [p for p in runs_dir.iterdir() if (p / DB_NAME).is_file()]
    return sorted(found, key=_written_at, reverse=True)


def _written_at(run_dir: Path) -> float:
    # The write-ahead log is written on every commit; the main file only at checkpoints.
    times = [f.stat().st_mtime for f in (run_dir / DB_NAME, run_dir / f"{DB_NAME}-wal") if f.exists()]
    return max(times, default=0.0)


def resolve_run_dir(run: str | None, runs_dir: Path) -> Path:
    """The run directory RUN names; the latest one under `runs_dir` when RUN is None."""
    if run is None:
        found = run_dirs(runs_dir)
        if not found:
            raise AlightError(f"no runs under {runs_dir}/",
                              hint="start one with `alight run` or `alight serve`, or pass a run directory")
        return found[0]
    path = Path(run)
    if path.is_file() and path.name.endswith(".db"):
        return path.parent
    for candidate in (path, runs_dir / run):
        if (candidate / DB_NAME).is_file():
            return candidate
    names = ", ".join(p.name for p in run_dirs(runs_dir)[:10]) or "none"
    raise AlightError(f"no run {run!r}: neither {runs_dir / run} nor {path} holds an {DB_NAME}",
                      hint=f"runs under {runs_dir}/: {names} (`alight inspect runs` lists them)")


@dataclass
class RunSource:
    """One run directory opened for reading: its store, and its run row when it has one."""

    run_dir: Path
    store: Store

    @classmethod
    def open(cls, run_dir: Path) -> RunSource:
        return cls(run_dir=run_dir, store=Store.open(run_dir))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> RunSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @cached_property
    def runs(self) -> list[Run]:
        return self.store.list_runs()

    @property
    def run(self) -> Run | None:
        """The directory's run (the newest, should it hold several); None for ad-hoc proxy traffic."""
        return self.runs[-1] if self.runs else None

    @property
    def name(self) -> str:
        return self.run.name if self.run else self.run_dir.name

    @cached_property
    def _names(self) -> dict[str, str]:
        return {r.id: r.name for r in self.runs}

    def run_name(self, run_id: str | None) -> str:
        """The name shown for an episode's run: its run row's name, or the directory's for ad-hoc episodes."""
        return self._names.get(run_id, self.run_dir.name) if run_id is not None else self.run_dir.name


def run_summaries(runs_dir: Path) -> list[dict]:
    """Every run directory under runs_dir, newest first, as run JSON shapes (shapes.run_json)."""
    from agentlightning_cli.inspect.shapes import run_json

    out = []
    for run_dir in run_dirs(runs_dir):
        with RunSource.open(run_dir) as src:
            run = src.run
            rounds = len(src.store.list_rounds(run.id)) if run else 0
            out.append(run_json(run, src.name, str(run_dir), rounds, sum(src.store.episode_counts().values())))
    return out
