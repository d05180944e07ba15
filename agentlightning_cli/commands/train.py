"""`alight train [RUN]`: train a LoRA adapter on one round of a recorded run, outside `alight run --rounds`.

Finds the run directory, the round (default: the last one with episodes), the base model (--base-model, else
what the run served) and the row limit (the run's, from its snapshot: run_snapshot.py), says which on stderr, then calls train/round_step.train_round and prints what went into the rows and why.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from agentlightning_cli.errors import AlightError
from agentlightning_cli.train.round_step import NothingToTrain, TrainReport, print_to_stderr, train_round

if TYPE_CHECKING:
    from agentlightning_cli.config import Settings
    from agentlightning_cli.store import Run, Store


def _pick_run(store: Store, run: str | None) -> Run:
    runs = store.list_runs()
    if not runs:
        raise NothingToTrain(f"{store.path} holds no run", hint="record one with `alight run` or `alight serve`")
    if run is not None:
        named = store.get_run(Path(run).name)
        if named is not None:
            return named
    return runs[-1]


def base_model_for(settings: Settings, run_row: Run, base_model: Path | None) -> tuple[Path, str]:
    """(model, where from): --base-model, else the model the run served (serve.model of its snapshot), else the
    embedded tiny model (a run that recorded no model served the default one)."""
    from agentlightning_cli.run_snapshot import recorded_home, served_model

    if base_model is not None:  # a folder, a built-in name (tiny, smollm2) or a Hub id, as --model takes
        from agentlightning_cli.serve.policy import resolve_model

        return resolve_model(settings, base_model), "--base-model"
    served = served_model(run_row.config)
    if served:
        return Path(served), "the model the run served"
    from agentlightning_cli.serve.tiny_model import tiny_model_dir

    return (tiny_model_dir(Path(recorded_home(run_row.config) or settings.home)),
            "the embedded tiny model: the run recorded no serve.model")


def row_limit_for(settings: Settings, run_row: Run) -> tuple[int, str]:
    """(limit, where from): the run's train.max_row_tokens, else the serve.max_model_len it served with (sized
    for its recipe), else today's settings (a run that recorded neither)."""
    from agentlightning_cli.run_snapshot import row_limit

    limit, why = row_limit(run_row.config)
    if limit is not None:
        return limit, why
    if settings.train.max_row_tokens:
        return settings.train.max_row_tokens, "train.max_row_tokens (the run recorded no limit)"
    return settings.serve.max_model_len, "serve.max_model_len (the run recorded no limit)"


def train(settings: Settings, run: str | None = None, round_index: int | None = None, base_model: Path | None = None,
          out: Path | None = None, merge_to: Path | None = None,
          log: Callable[[str], None] = print_to_stderr) -> TrainReport:
    from agentlightning_cli.inspect.source import resolve_run_dir
    from agentlightning_cli.store import Store
    from agentlightning_cli.train.trackers import check_installed, requested

    check_installed(requested(settings.train.report_to))  # a tracker missing: said before anything loads
    run_dir = resolve_run_dir(run, Path(settings.runs_dir))
    with Store.open(run_dir) as store:
        run_row = _pick_run(store, run)
        rounds = store.list_rounds(run_row.id)
        if not rounds:
            raise NothingToTrain(f"run {run_row.name!r} has no rounds yet", hint="run some tasks first")
        if round_index is None:
            with_episodes = [r.index for r in rounds if store.list_episodes(run_id=run_row.id, round_id=r.id)]
            if not with_episodes:
                raise NothingToTrain(f"run {run_row.name!r} has no episodes in any round", hint="run some tasks first")
            round_index = with_episodes[-1]
        base, base_why = base_model_for(settings, run_row, base_model)
        limit, limit_why = row_limit_for(settings, run_row)
        log(f"base model {base} ({base_why}); rows up to {limit} tokens ({limit_why})")
        # Named after the round it serves, as `alight run --rounds` names it: trained on round N, it is round N+1's
        # policy. Absolute: the path is stored in the run and handed to vLLM, which runs in another directory.
        default = run_dir / "adapters" / f"round-{round_index + 1}"
        out_dir = (Path(out) if out is not None else default).resolve()
        from agentlightning_cli.train.round_metrics import training_metrics
        from agentlightning_cli.train.trackers import Tracker, step_of

        with Tracker.open(settings.train.report_to, run_dir, run_row.name) as tracker:  # the run's, resumed
            report = train_round(store, run_row.id, round_index, base_model=base, settings=settings,
                                 out_dir=out_dir, log=log, row_limit=limit, tracker=tracker)
            tracker.log_round(step_of(store, run_row.id, round_index + 1),
                              training_metrics(store, run_row.id, round_index))
    if merge_to is not None:
        merge_adapter(base, out_dir, Path(merge_to))
    return report


def merge_adapter(base_model: Path, adapter: Path, out: Path) -> Path:
    """Full weights with the adapter folded in (for serving without LoRA support or exporting)."""
    if out.exists() and any(out.iterdir()):
        raise AlightError(f"--merge-to {out} exists and is not empty", hint="pass a new directory")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(base_model), local_files_only=True)
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(str(out), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(base_model), local_files_only=True).save_pretrained(str(out))
    return out


def render(report: TrainReport) -> str:
    """The summary `alight train` prints: rows, calls per row, break reasons, dropped groups, steps, time."""
    breaks = ", ".join(f"{k} {v}" for k, v in sorted(report.break_reasons.items())) or "none"
    dropped = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(report.dropped.items()) if v) or "nothing"
    last = report.metrics[-1] if report.metrics else {}
    lines = [
        f"trained     {report.steps} steps in {report.seconds:.1f} s ({report.episodes} episodes)",
        f"rows        {report.rows} from {report.calls} calls ({report.calls_per_row:.2f} calls per row,"
        f" merge={report.merge_rule})",
        f"breaks      {breaks}",
        *([f"conversations {_conversations(report.conversations)}"] if report.conversations else []),
        f"dropped     {report.dropped_groups} groups; {dropped}",
        f"temperature {report.temperature}    chat template: {report.chat_template or 'unknown'}",
    ]
    if last:
        lines.append(f"last step   loss {last.get('loss', float('nan')):.4f}  reward {last.get('reward', float('nan')):.3f}"
                     f"  tokens/s {last.get('tokens_per_s', 0):.0f}"
                     f"  clip fraction {last.get('clip_ratio/region_mean', 0.0):.3f}")
    imp = report.importance
    if imp.get("tokens"):
        lines.append(f"importance  mean {imp['mean']:.3f}  min {imp['min']:.3f}  max {imp['max']:.3f}"
                     f"  ({imp['truncated']:.1%} at the cap {imp['cap']:g}; round-start trainer vs vLLM)")
    lines.append(f"adapter     {report.adapter_dir}"
                 + (f" (continued from {report.base_adapter})" if report.base_adapter else " (fresh LoRA)"))
    return "\n".join(lines) + "\n"


def _conversations(counts: dict) -> str:
    """The round's conversations, forks, fallbacks and breaks per 100 calls of every kind (train/conversations.py);
    under render the breaks are the trainer's labels, as the `breaks` line shows them."""
    from agentlightning_cli.train.conversations import ConversationCounts

    return ConversationCounts.from_dict(counts).line()
