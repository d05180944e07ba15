"""StoredGRPOTrainer: GRPOTrainer fed with stored rows instead of generations. Imports TRL at module level, so
only grpo.train() imports this module. See grpo.py for why the two overrides exist."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.grpo_trainer import RepeatSampler
from trl.trainer.utils import pad



def importance_weights(trainer_logps: Any, vllm_logps: Any, mask: Any, mode: str, cap: float) -> Any:
    """exp(logp_trainer - logp_vllm), truncated at `cap`; 1 where masked. Per token, or one per sequence."""
    diff = torch.nan_to_num((trainer_logps - vllm_logps) * mask, nan=0.0)
    if mode == "none":
        return torch.ones_like(diff)
    if mode == "sequence_truncate":
        diff = diff.sum(-1, keepdim=True).expand_as(diff)
    return torch.clamp(torch.exp(diff), max=cap) * mask + (1 - mask)


class StoredGRPOTrainer(GRPOTrainer):
    """Trains on rows carrying prompt_ids, completion_ids, mask (1 = sampled), logprobs (vLLM's), advantage and
    old_logps: the round-start policy's logprobs (round_start_logps), computed once before the first optimizer
    step. TRL's ratio exp(logp_now - old_logps) is then 1 only at the first step, and its PPO clip bounds every
    later step and epoch of the round; recomputing old logprobs per generation batch, as TRL does for its own
    generations, would make the ratio 1 at every step here (each batch is trained by one optimizer step)."""

    is_mode = "token_truncate"
    is_cap = 3.0
    filters: tuple[float, int, float] = (1.0, 0, 0.0)  # (top_p, top_k, min_p) vLLM applied after the temperature

    # A round whose rows hold packed forks (train/row_tree.py) scores every batch through the tree path, so a row
    # is scored the same way at the round start and in the loss; `_branches` holds the batch's (row.branches).
    tree_round = False
    _branches: list[Any] | None = None

    def _compute_loss(self, model, inputs):
        self._branches = inputs.get("branches")
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._branches = None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **kwargs):
        """TRL's fused head scores under softmax(logits / T) only. When vLLM also applied top_p/top_k/min_p, every
        logprob the loss and the round-start scoring use comes from the same processed distribution vLLM sampled
        from (train/sampling.py), on full logits: B x T x V floats per chunk, so only then. Rows with packed forks
        need their own attention and positions: every batch of such a round goes through the same path."""
        if self.filters == (1.0, 0, 0.0) and not self.tree_round:
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **kwargs)
        from agentlightning_cli.train.sampling import processed_logps

        top_p, top_k, min_p = self.filters
        batch_size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start:start + batch_size], attention_mask[start:start + batch_size]
            extra = {}
            if self.tree_round:  # each token attends to its own context only, positioned at its depth in it
                branches = (self._branches or [[]] * input_ids.size(0))[start:start + batch_size]
                attention = getattr(self.accelerator.unwrap_model(model).config, "_attn_implementation", "sdpa")
                mask, extra["position_ids"] = tree_inputs(mask, branches, self.model_dtype(model),
                                                          boolean=boolean_tree_mask(attention))
            with self.accelerator.autocast():
                logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1,
                               use_cache=False, **extra).logits[:, :-1]
            lp, ent = processed_logps(logits, ids[:, -logits_to_keep:], self.temperature, top_p, top_k, min_p,
                                      entropy=compute_entropy)
            logps.append(lp)
            entropies.append(ent)
        return (torch.cat(logps), torch.cat(entropies) if compute_entropy else None,
                torch.zeros((), device=input_ids.device) if compute_aux_loss else None)

    @staticmethod
    def model_dtype(model: Any) -> torch.dtype:
        return next(model.parameters()).dtype

    def round_start_logps(self, records: list[dict[str, Any]]) -> list[list[float]]:
        """Per row, the logprob of each completion token under the current (round-start) weights, scored as TRL
        scores them in the loss (same forward, same temperature); eval mode, no dropout."""
        was_training = self.model.training
        self.model.eval()
        out: list[list[float]] = []
        size = self.args.per_device_train_batch_size
        try:
            for start in range(0, len(records), size):
                chunk = records[start:start + size]
                t = self._tensors(chunk)
                self._branches = [x.get("branches") or [] for x in chunk]
                logps = self._score(t)
                out += [logps[i, :len(x["completion_ids"])].tolist() for i, x in enumerate(chunk)]
        finally:
            self._branches = None
            self.model.train(was_training)
        return out

    def _tensors(self, inputs: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        device = self.accelerator.device
        pad_id = self.processing_class.pad_token_id or 0

        def tensors(key: str, dtype: torch.dtype) -> list[torch.Tensor]:
            return [torch.tensor(x[key], dtype=dtype, device=device) for x in inputs]

        prompts = tensors("prompt_ids", torch.long)
        completions = tensors("completion_ids", torch.long)
        # completion_mask is attention (gaps are attended); tool_mask is the loss mask (gaps not trained)
        return {"prompt_ids": pad(prompts, padding_value=pad_id, padding_side="left"),
                "prompt_mask": pad([torch.ones_like(p) for p in prompts], padding_value=0, padding_side="left"),
                "completion_ids": pad(completions, padding_value=pad_id, padding_side="right"),
                "completion_mask": pad([torch.ones_like(c) for c in completions], padding_value=0,
                                       padding_side="right"),
                "tool_mask": pad(tensors("mask", torch.long), padding_value=0, padding_side="right"),
                "vllm_logps": pad(tensors("logprobs", torch.float32), padding_value=0.0, padding_side="right")}

    def _score(self, t: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model, torch.cat([t["prompt_ids"], t["completion_ids"]], dim=1),
                torch.cat([t["prompt_mask"], t["completion_mask"]], dim=1), t["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size)
        return logps

    def _log_batch(self, inputs: list[dict[str, Any]], *tensors: Any) -> None:
        """The step's metrics over every training process (each holds its shard of the rows): rewards, rows, calls,
        tokens and importance weights gathered, so the store sees the whole step, not the main process's share."""
        from accelerate.utils import gather_object

        parts = gather_object([_batch_numbers(inputs, *tensors)])
        rewards = torch.tensor([r for p in parts for r in p["rewards"]] or [0.0])
        metrics = self._metrics["train"]
        metrics["reward"].append(rewards.mean().item())
        metrics["reward_std"].append(rewards.std().item() if len(rewards) > 1 else 0.0)
        metrics["rows"].append(float(sum(p["rows"] for p in parts)))
        metrics["merged_calls"].append(float(sum(p["calls"] for p in parts)))
        metrics["tokens"].append(float(sum(p["tokens"] for p in parts)))
        trained = [p for p in parts if p["trained"]]
        if trained:
            count = sum(p["trained"] for p in trained)
            metrics["importance/mean"].append(sum(p["rho_sum"] for p in trained) / count)
            metrics["importance/min"].append(min(p["rho_min"] for p in trained))
            metrics["importance/max"].append(max(p["rho_max"] for p in trained))
            metrics["sampling_logp_difference/mean"].append(sum(p["diff_sum"] for p in trained) / count)

    def _get_train_sampler(self, dataset: Any = None) -> RepeatSampler:
        # Each row once per epoch: groups are ours (advantages precomputed), so no repeating a prompt
        # num_generations times. The block is still handed out steps_per_generation times (TRL buffers it).
        return RepeatSampler(data_source=dataset if dataset is not None else self.train_dataset,
                             mini_repeat_count=1, batch_size=self.args.generation_batch_size,
                             repeat_count=self.num_iterations * self.args.steps_per_generation,
                             shuffle=True, seed=self.args.seed)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        device = self.accelerator.device
        t = self._tensors(inputs)
        prompt_ids, prompt_mask, completion_ids = t["prompt_ids"], t["prompt_mask"], t["completion_ids"]
        completion_mask, tool_mask, vllm_logps = t["completion_mask"], t["tool_mask"], t["vllm_logps"]
        loss_mask = completion_mask * tool_mask
        num_items_in_batch = self.accelerator.gather(loss_mask.sum()).sum()
        # The round-start policy's logprobs, carried with the rows (grpo.build_trainer sets them).
        old_logps = pad([torch.tensor(x["old_logps"], dtype=torch.float32, device=device) for x in inputs],
                        padding_value=0.0, padding_side="right")
        # rho corrects only the engine mismatch: round-start trainer vs what vLLM sampled with; the policy's drift
        # during the round is the PPO ratio's job (old_per_token_logps below), bounded by TRL's clip.
        rho = importance_weights(old_logps, vllm_logps, loss_mask.to(old_logps.dtype), self.is_mode, self.is_cap)
        advantage = torch.tensor([x["advantage"] for x in inputs], dtype=old_logps.dtype, device=device)

        self._log_batch(inputs, prompt_mask, completion_mask, loss_mask, rho, old_logps, vllm_logps)
        return {
            "prompt_ids": prompt_ids, "prompt_mask": prompt_mask,
            "completion_ids": completion_ids, "completion_mask": completion_mask, "tool_mask": tool_mask,
            # (B, T): the episode's advantage x its row weight x the truncated importance weight, per token
            "advantages": advantage[:, None] * rho,
            "old_per_token_logps": old_logps, "num_items_in_batch": num_items_in_batch,
            "branches": [x.get("branches") or [] for x in inputs],  # split and shuffled with the rows by TRL
        }


TREE_ATTENTION = ("sdpa", "eager")  # the implementations that take a prepared 4D tensor mask as it is


def boolean_tree_mask(attention: str | None) -> bool:
    """Whether the model's attention implementation takes the tree mask as booleans (SDPA) or additive floats
    (eager). Any other (flash attention, flex) would not apply a 4D tensor mask as given: refused, not guessed."""
    if attention not in TREE_ATTENTION:
        from agentlightning_cli.errors import AlightError

        raise AlightError(f"packed forks need {' or '.join(TREE_ATTENTION)} attention; this model uses {attention!r}",
                          hint="set train.forks: row (each fork its own row) or load the model with sdpa attention")
    return attention == "sdpa"


def tree_inputs(padding: Any, branches: list[Any], dtype: torch.dtype, boolean: bool) -> tuple[Any, Any]:
    """(4D attention mask (B, 1, T, T), position ids (B, T)) for a batch laid out as TRL lays it out (prompt
    padded on the left, completion on the right; `padding` is that 2D mask): each real token attends to its
    ancestors (row_tree.attention) and sits at its depth; a padding token attends to itself only (no empty
    softmax row). Boolean (True = attend) for SDPA, additive floats for eager attention."""
    from agentlightning_cli.train import row_tree

    size, width = padding.shape
    allowed = torch.eye(width, dtype=torch.bool, device=padding.device).repeat(size, 1, 1)
    positions = torch.zeros(size, width, dtype=torch.long, device=padding.device)
    for i in range(size):
        real = padding[i].nonzero().flatten()
        first, length = int(real[0]), len(real)
        tree = [tuple(b) for b in branches[i] or []]
        allowed[i, first:first + length, first:first + length] = row_tree.attention(length, tree).to(padding.device)
        positions[i, first:first + length] = torch.tensor(row_tree.positions(length, tree), device=padding.device)
    allowed = allowed[:, None]
    if boolean:
        return allowed, positions
    floor = torch.finfo(dtype).min
    return torch.zeros(allowed.shape, dtype=dtype, device=padding.device).masked_fill(~allowed, floor), positions


def _batch_numbers(inputs: list[dict[str, Any]], prompt_mask: Any, completion_mask: Any, loss_mask: Any, rho: Any,
                   old_logps: Any, vllm_logps: Any) -> dict[str, Any]:
    """One process's share of an optimizer step's metrics, in sums that add up over processes."""
    real = [x for x in inputs if x["calls"] > 0]  # padding rows have no calls
    trained = loss_mask.bool()
    out = {"rewards": [x["reward"] for x in real], "rows": len(real), "calls": sum(x["calls"] for x in real),
           "tokens": float(prompt_mask.sum().item() + completion_mask.sum().item()), "trained": int(trained.sum())}
    if trained.any():
        out.update(rho_sum=rho[trained].sum().item(), rho_min=rho[trained].min().item(),
                   rho_max=rho[trained].max().item(), diff_sum=(old_logps - vllm_logps).abs()[trained].sum().item())
    return out


def importance_summary(records: list[dict[str, Any]], mode: str, cap: float) -> dict[str, Any]:
    """The round's importance weights over its trained tokens (padding rows have no calls): mean, min, max, the
    share truncated at the cap, and the mean |logp_roundstart - logp_vllm| they come from."""
    weights, diffs = [], []
    for x in records:
        if not x["calls"]:
            continue
        old = torch.tensor([x["old_logps"]], dtype=torch.float32)
        vllm = torch.tensor([x["logprobs"]], dtype=torch.float32)
        mask = torch.tensor([x["mask"]], dtype=torch.float32)
        trained = mask.bool()
        weights.append(importance_weights(old, vllm, mask, mode, cap)[trained])
        diffs.append((old - vllm).abs()[trained])
    if not weights or not sum(len(w) for w in weights):
        return {"tokens": 0}
    rho, diff = torch.cat(weights), torch.cat(diffs)
    return {"tokens": len(rho), "mean": rho.mean().item(), "min": rho.min().item(), "max": rho.max().item(),
            "truncated": (rho >= cap).float().mean().item() if mode != "none" else 0.0, "cap": cap, "mode": mode,
            "logp_difference_mean": diff.mean().item()}


class StepLog(TrainerCallback):
    """Collects each logged optimizer step (loss, grad norm, TRL's metrics and ours) for the store."""

    def __init__(self, on_step: Callable[[dict[str, Any]], None] | None = None):
        self.steps: list[dict[str, Any]] = []
        self.on_step = on_step
        self._last = time.perf_counter()

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
        self._last = time.perf_counter()  # the first step's time excludes model loading and round-start scoring

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001 - transformers' signature
        if not logs or "loss" not in logs:
            return
        now = time.perf_counter()
        entry = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float))}
        entry["step"], entry["seconds"] = state.global_step, now - self._last
        if entry.get("tokens") and entry["seconds"] > 0:
            entry["tokens_per_s"] = entry["tokens"] / entry["seconds"]  # one generation batch per optimizer step
        self._last = now
        self.steps.append(entry)
        if self.on_step is not None:
            self.on_step(entry)
