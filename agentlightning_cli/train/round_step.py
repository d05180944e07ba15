"""train_round: one round's episodes -> rows -> advantages -> GRPO + LoRA -> an adapter for the next round.

The API `alight train` and `alight run --rounds` call (docs/contracts.md). Everything it decides is written to
the store (train_rounds, train_steps), so `alight inspect` can show why a round trained the way it did.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentlightning_cli.errors import AlightError
from agentlightning_cli.train import advantages as adv
from agentlightning_cli.train.helper_calls import harness_model
from agentlightning_cli.train.reward_control import ControlReport, control_rewards
from agentlightning_cli.train.rows import END_OF_TURN_TOKENS, RowContext, RowReport, build_rows

# Metrics TRL (and our trainer) log -> TrainStep columns.
_STEP_FIELDS = {"loss": "loss", "reward": "reward_mean", "reward_std": "reward_std",
                "clip_ratio/region_mean": "clip_fraction", "grad_norm": "grad_norm", "tokens_per_s": "tokens_per_s"}
# Calls never trained by rule (their tokens stay as context when a later call continues them), and why.
_LEFT_OUT = {"greedy_calls": "sampled at temperature 0, the argmax is not a sample of the policy",
             "penalised_calls": "sampled with a presence/frequency/repetition penalty, whose logprobs depend on each"
                                " token's earlier count, which the trainer does not reproduce",
             "constrained_calls": "sampled under a constraint (tool_choice required or named, structured outputs,"
                                  " logit bias, min_tokens, ...), which vLLM applies before its logprobs and the"
                                  " trainer does not reproduce",
             "helper_calls": "helper calls of the harness (another model name than its own; train.helper_calls:"
                             " train trains them)"}


class NothingToTrain(AlightError):
    """The round has nothing trainable; the message says why (never zero silent steps)."""


def print_to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class TrainReport:
    adapter_dir: Path
    rows: int
    calls: int
    steps: int
    seconds: float
    break_reasons: dict[str, int]
    dropped_groups: int
    metrics: list[dict[str, Any]] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    episodes: int = 0
    merge_rule: str = "strict"
    temperature: float = 1.0
    base_adapter: str | None = None
    chat_template: str | None = None
    importance: dict[str, Any] = field(default_factory=dict)  # the round's importance weights (grpo.py)
    reward_control: dict[str, Any] = field(default_factory=dict)  # train.reward_control as applied (reward_control.py)
    conversations: dict[str, Any] = field(default_factory=dict)  # train/conversations.py: the round's counts

    @property
    def calls_per_row(self) -> float:
        return self.calls / self.rows if self.rows else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"adapter_dir": str(self.adapter_dir), "rows": self.rows, "calls": self.calls,
                "calls_per_row": round(self.calls_per_row, 3), "steps": self.steps, "seconds": round(self.seconds, 3),
                "break_reasons": self.break_reasons, "dropped_groups": self.dropped_groups, "dropped": self.dropped,
                "episodes": self.episodes, "merge_rule": self.merge_rule, "temperature": self.temperature,
                "base_adapter": self.base_adapter, "chat_template": self.chat_template, "importance": self.importance,
                "reward_control": self.reward_control, "conversations": self.conversations, "metrics": self.metrics}


def row_context(tokenizer: Any, max_tokens: int | None) -> RowContext:
    """What row building needs from the model's tokenizer (decode for break reasons, end-of-turn ids for splice)."""
    specials = list(dict.fromkeys([*tokenizer.all_special_tokens, *END_OF_TURN_TOKENS]))
    eot = {tokenizer.eos_token_id} | {tokenizer.convert_tokens_to_ids(t) for t in END_OF_TURN_TOKENS
                                      if t in tokenizer.get_vocab()}
    return RowContext(decode=lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False),
                      special_tokens=specials, eot_ids=frozenset(i for i in eot if i is not None),
                      max_tokens=max_tokens)


def helper_rule(ctx: RowContext, run_config: dict[str, Any] | None, train: Any) -> None:
    """Helper calls (another model name than the harness's own, recorded in the run's snapshot:
    train/helper_calls.py) stay out of the rows unless train.helper_calls is `train`."""
    ctx.harness_model, ctx.train_helpers = harness_model(run_config), train.helper_calls == "train"


def collect_rows(store: Any, episode_ids: list[str], ctx: RowContext, merge: str,
                 by_episode: dict[str, dict[str, Any]] | None = None) -> RowReport:
    """The round's rows; `by_episode` (when given) gets each episode's conversation counts."""
    report = RowReport()
    for ep in episode_ids:
        built = build_rows(ep, store.get_calls(ep), ctx, merge)
        if by_episode is not None:
            by_episode[ep] = built.counts.to_dict()
        report.extend(built)
    return report


def check_base_model(base_model: Path | None) -> Path:
    if base_model is None or not (Path(base_model) / "config.json").is_file():
        raise AlightError(f"base model not found: {base_model} has no config.json",
                          hint="pass --base-model DIR (a local Hugging Face model directory, the one vLLM served)")
    return Path(base_model)


def check_vocabulary(rows: list[Any], base_model: Path) -> None:
    """Every stored id must index the base model's embeddings. Calls sampled by another model (a wrong
    `--base-model`, a run served with another tokenizer) otherwise end in an IndexError deep inside the forward
    pass, or worse, train on ids that mean other tokens; a vocabulary too small is the one mismatch that is
    certain from the ids alone."""
    import json

    config = json.loads((base_model / "config.json").read_text(encoding="utf-8"))
    vocab = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    if not isinstance(vocab, int):
        return
    for row in rows:
        top = max(max(row.prompt_ids, default=-1), max(row.completion_ids, default=-1))
        if top >= vocab:
            raise AlightError(
                f"the calls of episode {row.episode_id} (first call {row.call_ids[0]}) hold token id {top}, outside"
                f" the vocabulary of {base_model} ({vocab} ids): they were sampled by another model",
                hint="train with the model the run served: without --base-model, `alight train RUN` takes the one the"
                     " run recorded (serve.model in its snapshot)")


def train_round(store: Any, run_id: str, round_index: int, *, base_model: Path, settings: Any, out_dir: Path,
                log: Callable[[str], None] = print_to_stderr, row_limit: int | None = None,
                tracker: Any = None) -> TrainReport:
    """Train on the episodes of round `round_index`, continuing from that round's adapter; write out_dir.
    `row_limit`: the longest row kept (default train.max_row_tokens, else serve.max_model_len of `settings`).
    `tracker`: a train.trackers.Tracker that gets each step at the run's step (trackers.step_of)."""
    started = time.perf_counter()
    base_model = check_base_model(base_model)
    run = store.get_run(run_id)
    if run is None:
        raise NothingToTrain(f"no run {run_id!r} in {store.path}", hint="`alight inspect` lists the runs")
    rnd = next((r for r in store.list_rounds(run.id) if r.index == round_index), None)
    if rnd is None:
        raise NothingToTrain(f"run {run.name!r} has no round {round_index}",
                             hint=f"it has rounds {[r.index for r in store.list_rounds(run.id)]}")
    episodes = store.list_episodes(run_id=run.id, round_id=rnd.id)
    if not episodes:
        raise NothingToTrain(f"round {round_index} of run {run.name!r} has no episodes", hint="run some tasks first")
    t = settings.train
    rewards, dropped = adv.trainable_rewards(episodes, t.outcomes, settings.reward.on_error)
    if not rewards:
        raise NothingToTrain(f"none of the {len(episodes)} episodes of round {round_index} has a reward to train on"
                             f" ({_counts(dropped)})",
                             hint="check the reward command (`alight inspect`), train.outcomes and reward.on_error")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base_model), local_files_only=True)
    ctx = row_context(tokenizer, row_limit or t.max_row_tokens or settings.serve.max_model_len)
    source, ctx.sampling_defaults = _generation_defaults(run.config, settings, base_model)
    helper_rule(ctx, run.config, t)
    ctx.pack_forks = t.forks == "pack"
    if ctx.sampling_defaults:
        log(f"serve.generation_config was {source!r} for this run: vLLM applied the model's generation_config.json"
            f" to keys a call did not send ({_settings(ctx.sampling_defaults)}), so its rows are scored with them")
    # Rows first, advantages after: a group's mean and std are over the episodes that train (an episode whose
    # calls make no row, or only rows at another temperature, is not in the loss, so not in its baseline).
    by_episode: dict[str, dict[str, Any]] = {}
    report = collect_rows(store, list(rewards), ctx, t.merge, by_episode)
    dropped.update(report.dropped)
    if not report.rows:
        raise NothingToTrain(f"the {len(rewards)} rewarded episodes of round {round_index} have no calls with token"
                             f" ids to train on ({_counts(dropped)})",
                             hint=_no_rows_hint(dropped))
    check_vocabulary(report.rows, base_model)
    (temperature, *filters), rows = _one_sampling(report.rows, dropped)
    scored, control = round_advantages(rewards, rows, dropped, t, round_index)
    if control.mode != "none":
        log(f"reward control {control.mode} (seed {control.seed}): the rewards of {control.groups} groups permuted"
            f" across their episodes, {control.moved} episodes scored with another episode's reward")
    if not scored.advantages:
        raise NothingToTrain(f"every group of round {round_index} has equal rewards (or one episode) among the"
                             f" episodes with rows: no signal to learn from ({_counts(dropped)})",
                             hint="use more attempts per task, or a reward that tells attempts apart")
    rows = adv.apply(rows, scored, t.loss_type)
    previous = _previous_adapter(rnd.adapter_path)
    from agentlightning_cli.serve.adapters import training_rank

    rank = _adapter_rank(previous) or training_rank(base_model, settings)
    choice = _template_choice(Path(store.path).parent, run.config or {})
    log(f"training round {round_index}: {len(rows)} rows from {sum(len(r.call_ids) for r in rows)} calls of"
        f" {scored.episodes} episodes ({scored.groups} groups), merge={t.merge}, temperature={temperature},"
        f"{_filters_note(filters)}"
        f" LoRA rank {rank}{', continuing ' + str(previous) if previous else ''}")
    for key, why in _LEFT_OUT.items():
        if dropped[key]:
            log(f"  left out {dropped[key]} {key.replace('_', ' ')}: {why}")
    store.clear_train_steps(run.id, round_index)
    from agentlightning_cli.train.trackers import step_of

    offset = step_of(store, run.id, round_index)  # TRL counts from 0 each round; the trackers' step goes on

    def on_step(entry: dict[str, Any]) -> None:
        from agentlightning_cli.store import TrainStep

        known = {col: entry.get(key) for key, col in _STEP_FIELDS.items()}
        extra = {k: v for k, v in entry.items() if k not in _STEP_FIELDS and k != "step"}
        store.add_train_steps([TrainStep(run.id, round_index, int(entry["step"]), **known,
                                         rows=_int(entry.get("rows")), merged_calls=_int(entry.get("merged_calls")),
                                         extra=extra)])
        if tracker is not None:
            tracker.log_trainer_step(offset, entry)
        log(f"  step {int(entry['step'])}: loss {entry.get('loss', float('nan')):.4f}"
            f" reward {entry.get('reward', float('nan')):.3f} tokens/s {entry.get('tokens_per_s', 0):.0f}")

    from agentlightning_cli.train.grpo import GRPORun, out_of_memory, train

    job = GRPORun(base_model=base_model, rows=rows, out_dir=Path(out_dir), settings=t, temperature=temperature,
                  rank=rank, previous_adapter=previous, on_step=on_step,
                  logging_dir=Path(store.path).parent / "logs" / "tensorboard" / f"round-{round_index}")
    oom: str | None = None
    try:
        result = train(job)
    except Exception as exc:
        if not out_of_memory(exc):
            raise
        # Only its first line is kept: the error object must not outlive this block. Its traceback holds the
        # trainer's frames, and through them its model, for as long as it lives — and `alight run` wakes vLLM (its
        # weights and KV cache back onto the GPU) while the round's error is on its way up. Measured on an H200
        # (bench/results/gpu.json, out_of_memory): a 1B trainer's 2 GB stayed allocated while the error lived,
        # clearing the traceback's frames did not free it, and dropping the error did.
        oom = (str(exc).strip().splitlines() or ["out of memory"])[0][:300]
    if oom is not None:
        from agentlightning_cli.serve.gpu_plan import oom_hint
        from agentlightning_cli.train.grpo import release_memory

        release_memory()  # outside the except block: the out-of-memory error is gone, and what it held with it
        raise AlightError(f"training round {round_index} ran out of GPU memory ({len(rows)} rows of up to "
                          f"{max(r.length for r in rows)} tokens, batch {t.batch_size}, LoRA rank {rank}): {oom}",
                          oom_hint(settings))
    imp = result.importance
    if imp.get("tokens"):
        log(f"  importance weights (round-start trainer vs vLLM, cap {imp['cap']:g}): mean {imp['mean']:.4f}"
            f" min {imp['min']:.4f} max {imp['max']:.4f}, {imp['truncated']:.1%} truncated;"
            f" mean |logp difference| {imp['logp_difference_mean']:.4f}")
    out = TrainReport(adapter_dir=Path(out_dir), rows=len(rows), calls=sum(len(r.call_ids) for r in rows),
                      steps=result.steps, seconds=time.perf_counter() - started, break_reasons=dict(report.breaks),
                      dropped_groups=dropped["zero_variance_groups"] + dropped["single_episode_groups"],
                      metrics=result.metrics, dropped=dict(dropped), episodes=scored.episodes, merge_rule=t.merge,
                      temperature=temperature, base_adapter=str(previous) if previous else None, chat_template=choice,
                      importance=imp, reward_control=control.to_dict(), conversations=report.counts.to_dict())
    from agentlightning_cli.store import TrainRound

    store.put_train_round(TrainRound(
        run.id, round_index, rows=out.rows, calls=out.calls, steps=out.steps, seconds=out.seconds,
        merge_rule=t.merge, break_reasons=out.break_reasons, dropped=out.dropped, adapter_dir=str(out_dir),
        base_adapter=out.base_adapter, chat_template=choice,
        detail={"rank": rank, "learning_rate": t.learning_rate, "temperature": temperature, "episodes": out.episodes,
                "sampling": dict(zip(("top_p", "top_k", "min_p"), filters)),
                "generation_defaults": ctx.sampling_defaults,
                "loss_type": t.loss_type, "breaks": report.break_log[:200],
                "advantages": {e: round(a, 6) for e, a in scored.advantages.items()},
                "importance": result.importance, "reward_control": control.to_dict(),
                "conversations": out.conversations, "conversations_by_episode": by_episode}))
    return out


def round_advantages(rewards: dict[str, tuple[str, float]], rows: list[Any], dropped: Counter, t: Any,
                     round_index: int) -> tuple[adv.AdvantageReport, ControlReport]:
    """The advantages of the rewarded episodes that have rows, under train.reward_control (`t`: train settings).
    The control permutes after the row filter, so a group's mean and spread are those of the episodes that train."""
    kept, control = control_rewards(adv.with_rows(rewards, rows, dropped), t.reward_control, t.seed, round_index)
    scored = adv.group_advantages(kept, t.scale_rewards)
    dropped.update(scored.dropped)
    return scored, control


def _one_sampling(rows: list[Any], dropped: Counter) -> tuple[tuple[float, float, int, float], list[Any]]:
    """The most common (temperature, top_p, top_k, min_p) and its rows: the trainer scores a round under one
    distribution, so rows sampled under another would get wrong logprobs and importance weights. Others are
    dropped and counted (other_temperature_rows, or other_sampling_rows when only the filters differ)."""
    key = Counter(r.sampling for r in rows).most_common(1)[0][0]
    kept = [r for r in rows if r.sampling == key]
    for r in rows:
        if r.sampling != key:
            dropped["other_temperature_rows" if r.temperature != key[0] else "other_sampling_rows"] += 1
    return key, kept


def _generation_defaults(config: dict[str, Any] | None, settings: Any, base_model: Path) -> tuple[str, dict]:
    """(serve.generation_config the run's vLLM ran with, the defaults it applied to unsent keys). A snapshot with a
    serve layer but no generation_config is from before vLLM got the flag: it ran with vLLM's own default, auto.
    No snapshot (a run served elsewhere): the current setting. `auto` reads the served model's directory."""
    from agentlightning_cli.run_snapshot import served_model, settings_of
    from agentlightning_cli.train.sampling import generation_defaults

    serve = settings_of(config).get("serve")
    source = (serve.get("generation_config") or "auto") if serve else settings.serve.generation_config
    model = served_model(config)
    folder = model if model and Path(model).is_dir() else base_model
    return source, generation_defaults(source, folder)


def _no_rows_hint(dropped: Counter) -> str:
    if dropped["greedy_calls"]:
        return ("calls sampled at temperature 0 (greedy) are never trained: sample at a temperature > 0"
                " (proxy.sampling.temperature, or the harness's own setting)")
    if dropped["penalised_calls"]:
        return ("calls sampled with a presence, frequency or repetition penalty are never trained (vLLM's logprobs"
                " then depend on each token's earlier count, which the trainer does not reproduce): send none, and"
                " keep serve.generation_config at vllm if the model's generation_config.json sets one")
    if dropped["helper_calls"] and not dropped["constrained_calls"] and not dropped["over_long_rows"]:
        return ("the harness's helper calls (another model name than its recipe's `model`) are not trained by"
                " default: set train.helper_calls: train to train them")
    if dropped["constrained_calls"]:
        return ("calls sampled under a constraint (a forced tool call: proxy.sampling.tool_choice required or the"
                " harness's own tool_choice; response_format or structured outputs; logit_bias; min_tokens; allowed"
                " or banned tokens) are never trained: vLLM's logprobs are then not the policy's; let the model"
                " sample freely (`alight inspect` shows each call's recorded constraints)")
    return "calls must go through alight's proxy to a vLLM upstream that returns token ids"


def _filters_note(filters: Any) -> str:
    top_p, top_k, min_p = filters
    parts = [f"top_p={top_p}" if top_p < 1 else "", f"top_k={top_k}" if top_k else "", f"min_p={min_p}" if min_p else ""]
    return (" " + " ".join(p for p in parts if p) + " (scored as vLLM sampled)") if any(parts) else ""


def _settings(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items())


def _previous_adapter(path: str | None) -> Path | None:
    if path and (Path(path) / "adapter_config.json").is_file():
        return Path(path)
    return None


def _adapter_rank(path: Path | None) -> int | None:
    if path is None:
        return None
    import json

    return int(json.loads((path / "adapter_config.json").read_text())["r"])


def _template_choice(run_dir: Path, config: dict[str, Any]) -> str | None:
    """What vLLM rendered this run's prompts with: recorded by the policy server in run_dir/chat_template.json;
    else the setting from the run's snapshot (a run served elsewhere)."""
    import json

    recorded = run_dir / "chat_template.json"
    if recorded.is_file():
        data = json.loads(recorded.read_text(encoding="utf-8"))
        return data["choice"] if data.get("choice") != "path" else f"path:{data.get('path')}"
    from agentlightning_cli.run_snapshot import settings_of

    setting = (settings_of(config).get("serve") or {}).get("chat_template")
    return f"{setting} (setting)" if setting else None


def _counts(counter: Counter) -> str:
    return ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in sorted(counter.items()) if v) or "nothing recorded"


def _int(value: Any) -> int | None:
    return None if value is None else int(round(value))
