"""Helpers for the training tests: a run whose round holds episodes with stored calls (real Store, real ids)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from agentlightning_cli.config import Settings
from agentlightning_cli.store import CallRecord, Store


def small_settings(**train: Any) -> Settings:
    settings = Settings()
    settings.train.lora_rank = 8
    settings.train.learning_rate = 1e-2
    settings.train.batch_size = 4
    settings.train.grad_accum = 2
    for key, value in train.items():
        setattr(settings.train, key, value)
    return settings


def call_record(episode_id: str, prompt: list[int], completion: list[int], logprobs: list[float] | None = None,
                temperature: float = 1.0, status: str = "ok") -> CallRecord:
    return CallRecord(episode_id=episode_id, protocol="openai-chat", method="POST", path="/v1/chat/completions",
                      status=status, http_status=200, stream=False, client_request=b"{}", started_at=1.0,
                      ended_at=2.0, prompt_token_ids=prompt, completion_token_ids=completion,
                      completion_logprobs=logprobs if logprobs is not None else [-3.0] * len(completion or []),
                      sampling={"temperature": temperature})


def record_round(store: Store, run_id: str, index: int, *, tasks: int = 2, attempts: int = 4, calls: int = 2,
                 adapter_path: str | None = None, seed: int = 0, rewards: Any = None, ids: bool = True) -> Any:
    """A round of `tasks` x `attempts` episodes, each `calls` chained calls (each prompt extends the last)."""
    rng = random.Random(seed)
    rnd = store.create_round(run_id, index, f"policy-r{index}", adapter_path)
    for task in range(tasks):
        base = [1] + [rng.randrange(5, 4000) for _ in range(12)]
        for attempt in range(attempts):
            ep = store.create_episode(run_id, rnd.id, f"task-{task}", attempt, "h", "k")
            prompt = list(base)
            for _ in range(calls):
                completion = [rng.randrange(5, 4000) for _ in range(6)] + [2]
                record = call_record(ep.id, prompt if ids else None, completion if ids else None)
                if not ids:
                    record.completion_logprobs = None
                store.add_call(record)
                prompt = prompt + completion + [rng.randrange(5, 4000) for _ in range(4)]
            reward = rewards(task, attempt) if rewards else float(attempt % 2)
            store.update_episode(ep.id, status="done", outcome="finished", reward=reward)
    return rnd


def new_run(tmp_path: Path, name: str = "r") -> tuple[Store, Any]:
    store = Store.open(tmp_path / "runs" / name)
    return store, store.create_run(name, {})


def record_exact_round(store: Store, run_id: str, index: int, *, tasks: int = 2, attempts: int = 4,
                       seed: int = 0) -> Any:
    """A round recorded under exact continuation, each episode as the proxy records the sub-agent pattern
    (tests/test_continuation_proxy.py has it live): two conversations interleaved, A1 B1 A2 B2 A3, then a fork of
    A at A2's request with its user turn edited. `calls.continuation` as the proxy writes it; id 2 ends a turn."""
    rng = random.Random(seed)
    rnd = store.create_round(run_id, index, f"policy-r{index}", None)

    def ids(n: int) -> list[int]:
        return [rng.randrange(5, 4000) for _ in range(n)]

    for task in range(tasks):
        system = [1] + ids(8)
        for attempt in range(attempts):
            ep = store.create_episode(run_id, rnd.id, f"task-{task}", attempt, "h", "k")
            prompts = {"c1": system + ids(5), "c2": system + ids(5)}

            def add(chain: str, kind: str, prompt: list[int], reason: str | None = None,
                    parent: str | None = None, masked: list | None = None) -> list[int]:
                completion = ids(6) + [2]
                record = call_record(ep.id, prompt, completion)
                record.continuation = {"mode": "exact", "kind": kind, "reason": reason, "chain": chain,
                                       "parent": parent, "sampled_spans": [], "masked_spans": masked or [],
                                       "normalisations": {}, "shared_messages": 0, "mismatch": None, "differs": [],
                                       "first_difference": None, "plain_len": len(prompt),
                                       "sampling_params": {"temperature": 1.0}}
                store.add_call(record)
                return prompt + completion

            a1 = add("c1", "start", prompts["c1"])
            b1 = add("c2", "start", prompts["c2"])
            a2 = add("c1", "continue", a1 + ids(4))
            add("c2", "continue", b1 + ids(4))
            add("c1", "continue", a2 + ids(4))
            span = [len(prompts["c1"]), len(a1)]
            add("c3", "fork", a1 + ids(4), reason="edited", parent="c1", masked=[span])
            store.update_episode(ep.id, status="done", outcome="finished", reward=float(attempt % 2))
    return rnd


def sampled_spans(row) -> list[list[int]]:
    """The row's mask-1 stretches: what it trains as sampled."""
    spans, start = [], None
    for i, m in enumerate([*row.mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append(row.completion_ids[start:i])
            start = None
    return spans


def loss_and_gradient(tiny: Path, tmp_path: Path, rows: list, loss_type: str) -> tuple[float, Any, Any]:
    """TRL's loss (through the trainer alight builds) and its gradient over the LoRA weights for `rows` (advantages
    applied) in one batch of 4, after the policy moved off round start (ratios not 1, some tokens at the clip);
    also the trainer, for its metrics."""
    import torch

    from agentlightning_cli.train.grpo import GRPORun, _as_record, build_trainer, pad_rows

    settings = small_settings(loss_type=loss_type, batch_size=4, grad_accum=1, importance_sampling="none")
    trainer, _ = build_trainer(GRPORun(base_model=tiny, rows=rows, out_dir=tmp_path, settings=settings.train,
                                       temperature=1.0, rank=8))
    records = [_as_record(r) for r in pad_rows(rows, 4, 0)]
    for record, old in zip(records, trainer.round_start_logps(records)):
        record["old_logps"] = old
    torch.manual_seed(0)
    for name, p in trainer.model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.5)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    batch = trainer._generate_and_score_completions(records)
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    grad = torch.cat([p.grad.flatten() for n, p in trainer.model.named_parameters() if p.grad is not None])
    return loss.item(), grad, trainer
