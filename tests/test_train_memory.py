"""A round's training gives its memory back when it returns: the model and trainer are freed at once (they sit
in reference cycles, so only an explicit collection frees them before the next round loads another copy), and
resident memory does not grow round after round when each round trains in a new thread, as `alight run` does
(glibc keeps a thread's freed heap in its arena unless trimmed). Measured on CPU with the tiny model."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

import pytest
from train_support import new_run, record_round, small_settings

from agentlightning_cli.errors import AlightError
from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.train import grpo
from agentlightning_cli.train.round_step import train_round


ROUNDS = 3


def watch_models(monkeypatch) -> list[weakref.ref]:
    """A weak reference to each model the trainer loads from now on."""
    models: list[weakref.ref] = []
    real_load = grpo.load_policy

    def load_policy(*args, **kwargs):
        model, tokenizer, lora = real_load(*args, **kwargs)
        models.append(weakref.ref(model))
        return model, tokenizer, lora

    monkeypatch.setattr(grpo, "load_policy", load_policy)
    return models


def resident_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


def test_each_round_frees_its_model_and_memory_does_not_grow(tmp_path: Path, monkeypatch):
    tiny = build_tiny_model(tmp_path / "tiny")
    store, run = new_run(tmp_path)
    record_round(store, run.id, 0, tasks=4, attempts=4, calls=3)
    models = watch_models(monkeypatch)
    gc.disable()  # only the trainer's own release may free the cycles: no collection happens by chance
    try:
        after = []
        for n in range(ROUNDS):
            worker = threading.Thread(target=train_round, args=(store, run.id, 0),
                                      kwargs=dict(base_model=tiny, settings=small_settings(epochs=2),
                                                  out_dir=tmp_path / f"out-{n}"))
            worker.start()
            worker.join()
            assert models[-1]() is None, f"round {n}'s model is still alive after training returned"
            after.append(resident_bytes())
    finally:
        gc.enable()
        store.close()
    growth = [b - a for a, b in zip(after, after[1:])]
    print("resident after each round (MB):", [a // 2 ** 20 for a in after])
    assert all(g < 64 * 2 ** 20 for g in growth), growth


def test_a_round_out_of_gpu_memory_frees_its_model_before_the_error_leaves(tmp_path: Path, monkeypatch):
    # `alight run` wakes vLLM while a failed round's error is on its way up: the trainer's model must already be
    # gone then, though the error is still alive. The OOM is raised from inside the real trainer's loss, where the
    # model and a batch are in the frames' locals.
    import torch

    from agentlightning_cli.train.stored_trainer import StoredGRPOTrainer

    tiny = build_tiny_model(tmp_path / "tiny")
    store, run = new_run(tmp_path)
    record_round(store, run.id, 0, tasks=2, attempts=4)
    models = watch_models(monkeypatch)

    def compute_loss(self, model, inputs, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(StoredGRPOTrainer, "compute_loss", compute_loss)
    gc.disable()  # only alight's own release may free the cycles
    try:
        with pytest.raises(AlightError) as err:
            train_round(store, run.id, 0, base_model=tiny, settings=small_settings(), out_dir=tmp_path / "out")
        assert models and models[-1]() is None, "the failed round's model is alive while its error is"
        # torch's error is not kept (it would hold the trainer's frames); its first line is in the message.
        assert err.value.__cause__ is None and err.value.__context__ is None
        assert "ran out of GPU memory" in err.value.message and "CUDA out of memory" in err.value.message
    finally:
        gc.enable()
        store.close()
