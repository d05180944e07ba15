"""`alight inspect`: open the run a user names, read it through the store, print JSON or text, export, plot.

cli.py parses flags and calls one function here; the views, exports and the app live in agentlightning_cli/inspect/.
Data goes to stdout, notes (which run was picked, where a file went) to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agentlightning_cli.errors import AlightError
from agentlightning_cli.inspect import shapes, text
from agentlightning_cli.inspect.source import RunSource, resolve_run_dir, run_dirs, run_summaries
from agentlightning_cli.store import EpisodeSummary


def _note(message: str) -> None:
    sys.stderr.write(message + "\n")


def _open(run: str | None, runs_dir: Path) -> RunSource:
    run_dir = resolve_run_dir(run, runs_dir)
    if run is None:
        _note(f"run: {run_dir.name} (the latest under {runs_dir}/; pass RUN to choose)")
    return RunSource.open(run_dir)


def runs(runs_dir: Path) -> list[dict[str, Any]]:
    """Every run directory under runs_dir, newest first, as run shapes."""
    return run_summaries(runs_dir)


def filter_episodes(episodes: list[EpisodeSummary], round_index: int | None = None, status: str | None = None,
                    task: str | None = None, outcome: str | None = None) -> list[EpisodeSummary]:
    return [s for s in episodes
            if (round_index is None or s.round_index == round_index) and (status is None or s.episode.status == status)
            and (task is None or s.episode.task_id == task) and (outcome is None or s.episode.outcome == outcome)]


def list_episodes(run: str | None, runs_dir: Path, round_index: int | None = None, status: str | None = None,
                  task: str | None = None, outcome: str | None = None) -> list[dict[str, Any]]:
    with _open(run, runs_dir) as src:
        episodes = filter_episodes(src.store.episode_summaries(), round_index, status, task, outcome)
        return [shapes.episode_json(s, src.run_name(s.episode.run_id)) for s in episodes]


def list_text(run: str | None, runs_dir: Path, round_index: int | None = None, status: str | None = None,
              task: str | None = None, outcome: str | None = None) -> str:
    """`inspect list` as the text table (the columns of the JSON shape, built without the dicts)."""
    with _open(run, runs_dir) as src:
        return text.summaries_table(filter_episodes(src.store.episode_summaries(), round_index, status, task, outcome))


def _find(ident: str, run: str | None, runs_dir: Path) -> tuple[RunSource, str]:
    """The run holding episode or call `ident`: RUN's when given, else the first run directory that has it."""
    candidates = [resolve_run_dir(run, runs_dir)] if run else run_dirs(runs_dir)
    for run_dir in candidates:
        src = RunSource.open(run_dir)
        if src.store.get_episode(ident) is not None:
            return src, "episode"
        if ident.startswith("call") and src.store.call_summaries_by_id([ident]):
            return src, "call"
        src.close()
    where = f"run {run}" if run else f"any run under {runs_dir}/"
    raise AlightError(f"no episode or call {ident!r} in {where}",
                      hint="ids come from `alight inspect list` (episodes) and `alight inspect show EPISODE` (calls)")


def show_episode(src: RunSource, episode_id: str) -> dict[str, Any]:
    from agentlightning_cli.inspect.row_breaks import stored_episode_rows
    from agentlightning_cli.inspect.training import episode_training

    summary = next(s for s in src.store.episode_summaries_by_id([episode_id]))
    calls = src.store.call_summaries(episode_id)
    out = shapes.episode_json(summary, src.run_name(summary.episode.run_id))
    out["calls"] = [shapes.call_json(c) for c in calls]
    _mark_helpers(src, summary.episode.run_id, out["calls"], out)
    rows = stored_episode_rows(src.store, episode_id, summary.episode.run_id, summary.round_index)
    out["training"] = episode_training(src.store, summary, rows, calls)
    out["rows"] = rows.to_json()
    out["calls_with_ids"] = sum(1 for c in calls if c.prompt_len is not None)
    stored = src.store.get_patch(episode_id)
    out["patch"] = None if stored is None else {
        "files": stored.files, "bytes": stored.size, "error": stored.error,
        "text": None if stored.patch is None else stored.patch.decode("utf-8", errors="replace")}
    return out


def episode_patch(ident: str, run: str | None, runs_dir: Path) -> bytes:
    """`show EPISODE --patch`: the stored patch's exact bytes."""
    src, kind = _find(ident, run, runs_dir)
    with src:
        if kind != "episode":
            raise AlightError(f"{ident} is a call; --patch shows an episode's patch", "pass an episode id (ep-...)")
        stored = src.store.get_patch(ident)
    if stored is None:
        raise AlightError(f"episode {ident} has no patch recorded",
                          "patches are kept for episodes that reached their reward (alight 0.x runs before them have none)")
    if stored.patch is None:
        raise AlightError(f"episode {ident}'s patch was not kept: {stored.error}")
    return stored.patch


def show_call(src: RunSource, call_id: str, raw: bool) -> dict[str, Any]:
    summary = src.store.call_summaries_by_id([call_id])[0]
    call = src.store.get_call(call_id)
    out = shapes.call_detail_json(summary, call, raw=raw)
    episode = src.store.get_episode(summary.episode_id)
    _mark_helpers(src, episode.run_id if episode else None, [out], out)
    return out


def _mark_helpers(src: RunSource, run_id: str | None, calls: list[dict[str, Any]], out: dict[str, Any]) -> None:
    """`helper: true` on each call that asked for another model name than the run's harness (train/helper_calls.py),
    and `harness_model` on `out` (None when the run did not record it: then no call is a helper)."""
    from agentlightning_cli.train.helper_calls import harness_model

    run = src.store.get_run(run_id) if run_id is not None else None
    model = harness_model(run.config if run else None)
    out["harness_model"] = model
    for call in calls:
        call["helper"] = model is not None and call["client_model"] is not None and call["client_model"] != model


def show(ident: str, run: str | None, runs_dir: Path, as_json: bool, raw: bool, full: bool) -> str | dict[str, Any]:
    """`show EPISODE_OR_CALL`: the JSON object, or its text rendering."""
    src, kind = _find(ident, run, runs_dir)
    with src:
        if kind == "episode":
            data = show_episode(src, ident)
            return data if as_json else text.episode_text(data)
        data = show_call(src, ident, raw)
        if as_json:
            return data
        if raw:
            r = data["raw"]
            return "\n".join(f"── {name}\n{r[name] if isinstance(r[name], str) else r[name]}"
                             for name in ("client_request", "response", "upstream_request", "upstream_response")) + "\n"
        return text.call_text(data, full=full)


def export(run: str | None, runs_dir: Path, fmt: str, out: Path | None, round_index: int | None = None,
           attempt: int | None = None, model_name: str | None = None) -> int:
    from agentlightning_cli.inspect.export import open_output, write_jsonl
    from agentlightning_cli.inspect.har import write_har

    if fmt not in ("har", "jsonl", "swebench", "atif"):
        raise AlightError(f"unknown export format {fmt!r}", hint="use --format har, jsonl, swebench or atif")
    with _open(run, runs_dir) as src:
        episodes = filter_episodes(src.store.episode_summaries(), round_index)
        episodes = [s for s in episodes if attempt is None or s.episode.attempt == attempt]
        if fmt == "swebench":
            return _export_predictions(src, episodes, out, model_name)
        if fmt == "atif":
            from agentlightning_cli.inspect.atif import write_atif

            written, skipped = write_atif(src, episodes, out)
            left = f"; left out {skipped} episode(s) without model calls (ATIF needs a step)" if skipped else ""
            _note(f"wrote {written} ATIF trajectories{f' to {out}' if out else ''}{left}")
            return written
        stream = open_output(out)
        try:
            count = (write_har if fmt == "har" else write_jsonl)(src, episodes, stream)
        finally:
            if out is not None:
                stream.close()
            else:
                stream.flush()
    if out is not None:
        _note(f"wrote {count} calls to {out} ({fmt})")
    return count


def _export_predictions(src: RunSource, episodes: list[EpisodeSummary], out: Path | None, model_name: str | None) -> int:
    from agentlightning_cli.inspect.export import open_output
    from agentlightning_cli.inspect.predictions import write_predictions

    stream = open_output(out)
    try:
        written = write_predictions(src, episodes, stream, model_name)
    finally:
        if out is not None:
            stream.close()
        else:
            stream.flush()
    skipped = "".join(f"; left out {n} episode(s): {why}" for why, n in sorted(written.skipped.items()))
    _note(f"wrote {written.lines} SWE-bench prediction(s){f' to {out}' if out else ''}{skipped}")
    if written.replaced:
        _note(f"WARNING: {written.replaced} patch(es) were not UTF-8; undecodable bytes are written as U+FFFD")
    return written.lines


def stats(run: str | None, runs_dir: Path, plot: Path | None = None) -> dict[str, Any]:
    from agentlightning_cli.inspect.stats import run_stats

    with _open(run, runs_dir) as src:
        from agentlightning_cli.rollout.heldout import evaluations

        rounds = src.store.list_rounds(src.run.id) if src.run else []
        steps = src.store.list_train_steps(src.run.id) if src.run else []
        held = evaluations(src.store, src.run.id) if src.run else []  # --eval-task-set: the held-out curve
        data = run_stats(src.name, rounds, src.store.episode_summaries(), steps, held)
        for r in data["rounds"]:  # what the trainer counted (train/conversations.py); null: not trained (yet)
            trained = src.store.get_train_round(src.run.id, r["round"]) if src.run and r["round"] is not None else None
            r["conversations"] = (trained.detail or {}).get("conversations") if trained is not None else None
    if plot is not None:
        from agentlightning_cli.inspect.plot import write_plot

        write_plot(data, plot)
        _note(f"wrote {plot}")
    return data


FIRST_SCREEN = 100  # episodes read before the browser's first paint; the rest right after it


def _episode_summaries(run_dir: Path, limit: int | None = None) -> list[EpisodeSummary]:
    with RunSource.open(run_dir) as src:
        return src.store.episode_summaries(limit=limit)


def browse(run: str | None, runs_dir: Path) -> None:
    """The interactive app (Textual, imported only now): the run's episodes, or the list of runs without RUN."""
    from concurrent.futures import ThreadPoolExecutor

    run_dir = resolve_run_dir(run, runs_dir) if run else None
    if run_dir is None and not run_dirs(runs_dir):
        resolve_run_dir(None, runs_dir)  # raises the "no runs" error with its hint
    with ThreadPoolExecutor(1) as pool:
        # The first screen of episodes is read while Textual is imported (SQLite works without the GIL, so the two
        # overlap); the whole list (~0.2 s for 10,000) right after the first paint.
        preload = pool.submit(_episode_summaries, run_dir, FIRST_SCREEN) if run_dir else None
        from agentlightning_cli.inspect.app import InspectApp

        InspectApp(run_dir, runs_dir=runs_dir, preload=preload).run()


def runs_table(rows: list[dict[str, Any]]) -> str:
    """The table `alight inspect runs` prints."""
    from agentlightning_cli.inspect.text import cell, table, when

    return table(["run", "status", "rounds", "episodes", "created", "dir"], [
        [r["name"], r["status"], cell(r["rounds"]), cell(r["episodes"]), when(r["created_at"]), r["dir"]] for r in rows])
