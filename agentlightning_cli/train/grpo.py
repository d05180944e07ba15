"""GRPO + LoRA on stored rows: a trl.GRPOTrainer that never generates.

Why a subclass and not TRL's rollout_func: our rows carry precomputed per-episode advantages (groups of any
size, several rows per episode), a loss mask for the gaps between replies, and vLLM's sampling logprobs for
importance weights; rollout_func can express none of these. Two private methods are overridden
(`_get_train_sampler`, `_generate_and_score_completions`); TRL is pinned (1.16.*) for that reason and
tests/test_train_grpo.py checks the contract. TRL's own `_compute_loss` does the rest (clipped ratio,
loss normalisation, gradient accumulation, metrics).

Old logprobs: the round-start policy's, scored once for every row before the first optimizer step and carried
with the rows, so TRL's PPO ratio exp(logp_now - logp_roundstart) and its clip (epsilon) bound every later step
and epoch of the round; clip_ratio/region_mean (stored as clip_fraction) is the share of tokens at that clip.
Importance weights: rho = min(exp(logp_roundstart - logp_vllm), importance_cap) per token (or per sequence),
correcting only the engine mismatch (trainer vs vLLM at the same weights), folded into the (B, T) advantages.
Exact, because every clipped surrogate TRL offers is positively homogeneous in A. Reported per round
(train_rounds.detail.importance: mean, min, max, share truncated).
Sampling as sampled: the trainer divides logits by the rows' temperature (TRL's fused head) and, when vLLM also
applied top_p/top_k/min_p, scores every logprob (round-start and in the loss) under vLLM's processed distribution
(train/sampling.py, StoredGRPOTrainer._get_per_token_logps_and_entropies); calls with penalties never reach rows.
Heavy imports (torch, trl, peft) happen inside functions only.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentlightning_cli.errors import AlightError


@dataclass
class GRPORun:
    """Inputs of one training pass (one round), already settled by round_step."""

    base_model: Path
    rows: list[Any]  # train.rows.Row with advantage and weight set
    out_dir: Path
    settings: Any  # config.TrainSettings
    temperature: float
    rank: int
    previous_adapter: Path | None = None
    logging_dir: Path | None = None
    on_step: Callable[[dict[str, Any]], None] | None = None  # called with each step's metrics


@dataclass
class GRPOResult:
    steps: int
    metrics: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    importance: dict[str, Any] = field(default_factory=dict)  # stored_trainer.importance_summary of the round


def _quiet_hub() -> None:
    # Training never downloads: the base model is a local directory. TRL also reports telemetry when a trainer
    # is built, which hangs on a machine without network.
    for name, value in (("HF_HUB_OFFLINE", "1"), ("HF_HUB_DISABLE_TELEMETRY", "1"), ("TRL_EXPERIMENTAL_SILENCE", "1"),
                        ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(name, value)
    # TRL warns at import when the serving venv's vLLM is newer than its tested range; training never uses vLLM.
    warnings.filterwarnings("ignore", message="TRL currently supports vLLM")


def load_policy(base_model: Path, previous_adapter: Path | None, settings: Any, rank: int):
    """(model, tokenizer, peft_config): the base model, with the previous round's adapter when there is one."""
    import torch
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32  # bf16 on CPU is slower, and inexact
    tokenizer = AutoTokenizer.from_pretrained(str(base_model), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(base_model), dtype=dtype, local_files_only=True)
    if previous_adapter is not None:
        # is_trainable: a saved adapter loads frozen (inference_mode) otherwise. TRL refuses a PeftModel together
        # with a peft_config, so continuing passes none.
        return PeftModel.from_pretrained(model, str(previous_adapter), is_trainable=True), tokenizer, None
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [t for t in settings.target_modules if t in present]
    if not targets:
        raise AlightError(f"{base_model}: none of the LoRA target modules {settings.target_modules} exist in this model",
                          hint="set train.target_modules to the model's projection names")
    lora = LoraConfig(r=rank, lora_alpha=settings.lora_alpha or 2 * rank, lora_dropout=settings.lora_dropout,
                      target_modules=targets, bias="none", task_type="CAUSAL_LM")
    return model, tokenizer, lora


def train(job: GRPORun) -> GRPOResult:
    """Train LoRA on `job.rows`, save the adapter into `job.out_dir`; per-step metrics in the result. Under
    `accelerate launch` when train.processes > 1 or train.accelerate_config is set (train/launched.py)."""
    from agentlightning_cli.train import launched

    if launched.wanted(job.settings) and not launched.inside():
        done = launched.train_launched(job)
        return GRPOResult(steps=done["steps"], metrics=done["metrics"], seconds=done["seconds"],
                          importance=done["importance"])
    started = time.perf_counter()
    import_training_stack()  # before anything on this stack holds a model
    trainer, log = build_trainer(job)
    try:
        importance = trainer.round_importance
        trainer.train()
        if trainer.accelerator.is_main_process:  # one adapter, written once, whatever the number of processes
            job.out_dir.mkdir(parents=True, exist_ok=True)
            trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False).save_pretrained(str(job.out_dir))
            for name in ("adapter_model.safetensors", "adapter_config.json"):
                path = job.out_dir / name
                if path.exists():
                    path.chmod(0o644)  # written 0600; vLLM may run as another user
        trainer.accelerator.wait_for_everyone()
        steps = trainer.state.global_step
    finally:
        del trainer
        release_memory()
    return GRPOResult(steps=steps, metrics=log.steps, seconds=time.perf_counter() - started, importance=importance)


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is torch running out of GPU memory (torch.OutOfMemoryError on every torch build)."""
    import torch

    kind = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    return kind is not None and isinstance(exc, kind)


def release_memory() -> None:
    """Give a finished round's memory back. The trainer holds itself in reference cycles (TRL binds the model's
    forward), so only the cycle collector frees it; and glibc keeps freed heap in the arena of the thread that
    used it: `alight run` trains each round in a new thread, so without a trim every round added a new arena's
    worth (SmolLM2, rows of ~800 tokens, batch 4: ~10 GB per round; a learning run was OOM-killed at 22 GB in
    its second round's training). malloc_trim(0) returns the free pages of every arena to the system."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass
    libc = ctypes.util.find_library("c")
    if libc:
        try:
            ctypes.CDLL(libc).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl): nothing to trim
            pass


_imported = threading.Event()


def import_training_stack() -> None:
    """Import transformers' trainer, PEFT, TRL and alight's trainer once, in a thread of their own. Why: TRL imports
    vLLM, and vLLM keeps the exception of an optional import (torchcodec) with its traceback, which holds every
    frame that was on the importing stack, locals included. Imported from a round's own stack, that kept round 0's
    model (and its trainer) alive for the whole run, whatever was released; from this thread's short stack it
    keeps nothing that matters. A failed import is left for the caller's own import to raise."""
    if _imported.is_set():
        return

    def load() -> None:
        _quiet_hub()
        try:
            import peft  # noqa: F401
            import transformers  # noqa: F401
            import trl  # noqa: F401
            from transformers import AutoModelForCausalLM, AutoTokenizer, trainer_callback  # noqa: F401

            from agentlightning_cli.train import stored_trainer  # noqa: F401
        except Exception:  # noqa: BLE001 - raised again, with its message, where it is used
            return
        _imported.set()

    loader = threading.Thread(target=load, name="alight-import-trainer", daemon=True)
    loader.start()
    loader.join()


def build_trainer(job: GRPORun) -> tuple[Any, Any]:
    """(StoredGRPOTrainer over job.rows, its StepLog), ready to train(): the rows carry the round-start policy's
    logprobs (old_logps), scored once here before any optimizer step, and trainer.round_importance holds the
    round's importance weights computed from them."""
    _quiet_hub()
    import torch
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig

    from agentlightning_cli.train.stored_trainer import StepLog, StoredGRPOTrainer, importance_summary

    s = job.settings
    if not job.temperature > 0:  # rows.usable_calls never lets a greedy call through; TRL divides logits by it
        raise AlightError(f"cannot train at sampling temperature {job.temperature}",
                          hint="calls sampled at temperature 0 (greedy) are not samples of the policy")
    from transformers import set_seed

    set_seed(s.seed)  # the new adapter's LoRA init is the seed's, whatever this process drew before (or launched)
    model, tokenizer, lora = load_policy(job.base_model, job.previous_adapter, s, job.rank)
    world = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate launch (train/launched.py)
    if s.batch_size % world:
        raise AlightError(f"train.batch_size {s.batch_size} does not split over {world} training processes",
                          hint="make train.batch_size a multiple of train.processes (the rows per optimizer step)")
    gen_batch = s.batch_size * s.grad_accum  # rows per optimizer step over all processes
    rows = pad_rows(job.rows, gen_batch, tokenizer.pad_token_id or 0)
    steps = max(1, len(rows) // gen_batch) * s.epochs
    on_gpu = torch.cuda.is_available()
    if not on_gpu:  # the processes of one machine share its cores
        torch.set_num_threads(max(1, cpu_threads(s.cpu_threads) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    config = dict(
        # output_dir: only TensorBoard writes there (save_strategy="no"), under runs/<time>/
        output_dir=str(job.logging_dir or job.out_dir / ".trainer"), per_device_train_batch_size=s.batch_size // world,
        gradient_accumulation_steps=s.grad_accum, steps_per_generation=s.grad_accum,
        num_generations=2 if gen_batch % 2 == 0 else gen_batch, num_iterations=1, max_steps=steps,
        learning_rate=s.learning_rate, beta=0.0, loss_type=s.loss_type, temperature=job.temperature,
        logging_steps=1, save_strategy="no", report_to=_report_to(), seed=s.seed, data_seed=s.seed,
        bf16=on_gpu, gradient_checkpointing=on_gpu, remove_unused_columns=False, use_cpu=not on_gpu,
        lr_scheduler_type="constant", warmup_steps=0, disable_tqdm=True, dataloader_num_workers=0,
    )
    config.update(s.grpo)  # the user's GRPOConfig values win
    try:
        args = GRPOConfig(**config)
    except (TypeError, ValueError) as exc:
        raise AlightError(f"train.grpo: GRPOConfig refused these values: {exc}",
                          hint="check the keys under train.grpo against trl.GRPOConfig") from exc
    log = StepLog(job.on_step)
    records = [_as_record(r) for r in rows]
    trainer = StoredGRPOTrainer(
        model=model, reward_funcs=_no_reward, args=args, processing_class=tokenizer, peft_config=lora,
        train_dataset=Dataset.from_list(records), callbacks=[log],
    )
    trainer.is_mode, trainer.is_cap = s.importance_sampling, s.importance_cap
    trainer.filters = row_filters(job.rows)  # scored as vLLM sampled: temperature, then these (train/sampling.py)
    trainer.tree_round = any(r.branches for r in rows)  # packed forks: each token scored in its own context
    if trainer.tree_round:  # refused before the round starts, not at its first forward
        from agentlightning_cli.train.stored_trainer import boolean_tree_mask

        boolean_tree_mask(getattr(model.config, "_attn_implementation", None))
    for record, old in zip(records, trainer.round_start_logps(records)):
        record["old_logps"] = old
    trainer.train_dataset = Dataset.from_list(records)  # the dataloader is built from it in train()
    trainer.round_importance = importance_summary(records, s.importance_sampling, s.importance_cap)
    # The printer would put every log dict on stdout, which belongs to `alight train --json`; our own step lines
    # go to the log callback instead.
    trainer.remove_callback(PrinterCallback)
    return trainer, log


def cpu_threads(setting: int | None) -> int:
    """Threads for a CPU round: the setting, else OMP_NUM_THREADS, else every core this process may use. Training
    runs while vLLM is drained and no harness runs, so the cores are free: on 2 cores, 2 threads trained SmolLM2
    1.8x faster than 1 (bench/trainer_cpu.py)."""
    if setting:
        return max(1, setting)
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, len(os.sched_getaffinity(0)))


def row_filters(rows: list[Any]) -> tuple[float, int, float]:
    """(top_p, top_k, min_p) the rows were sampled with, after the temperature: one per round (round_step keeps
    the most common), since the trainer scores every row under one distribution."""
    found = {(r.top_p, r.top_k, r.min_p) for r in rows}
    if len(found) > 1:
        raise AlightError(f"rows sampled with different top_p/top_k/min_p cannot train together: {sorted(found)}",
                          hint="train.round_step keeps the most common setting; call train_round")
    return found.pop() if found else (1.0, 0, 0.0)


def _report_to() -> str:
    # train.report_to is honoured by alight itself (train/trackers.py), one tracker run for the whole alight run:
    # transformers' per-Trainer callbacks would restart the step and end the run at every round. The trainer's
    # log dicts reach those trackers through StepLog (round_step's on_step). train.grpo.report_to still wins.
    return "none"


def _no_reward(*_args: Any, **kwargs: Any) -> list[float]:
    # GRPOTrainer insists on a reward function; ours come from the store and are never recomputed.
    return [0.0] * len(kwargs.get("completion_ids", []))


def _as_record(row: Any) -> dict[str, Any]:
    return {"prompt": "", "prompt_ids": row.prompt_ids, "completion_ids": row.completion_ids, "mask": row.mask,
            "logprobs": row.logprobs, "advantage": row.advantage * row.weight, "reward": row.reward,
            "calls": len(row.call_ids), "branches": [list(b) for b in row.branches]}


def pad_rows(rows: list[Any], multiple: int, pad_id: int) -> list[Any]:
    """Rows plus fully masked copies up to a multiple of the generation batch: TRL's sampler drops an incomplete
    last batch, and a round smaller than one batch would train zero steps without a word."""
    from agentlightning_cli.train.rows import Row

    out = list(rows)
    while len(out) % multiple:
        out.append(Row(episode_id="", prompt_ids=[pad_id], completion_ids=[pad_id], mask=[0], logprobs=[0.0]))
    return out
