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
