"""Training under `accelerate launch` (train.processes: 2, gloo on CPU): the rows are sharded over two real
processes, and the round trains the same adapter as one process, within float tolerance; its steps reach the
store as they do from one process."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.train.round_step import train_round
from tests.train_support import new_run, record_round, small_settings

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _tensors(folder: Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(folder / "adapter_model.safetensors"), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def test_two_processes_train_the_same_adapter_as_one(tmp_path: Path, tiny: Path):
    store, run = new_run(tmp_path)
    record_round(store, run.id, 0)  # 2 tasks x 4 attempts: 8 rows, 2 optimizer steps of 4 rows
    logs: list[str] = []
    one = train_round(store, run.id, 0, base_model=tiny, settings=small_settings(batch_size=4, grad_accum=1),
                      out_dir=tmp_path / "one", log=logs.append)
    two = train_round(store, run.id, 0, base_model=tiny,
                      settings=small_settings(batch_size=4, grad_accum=1, processes=2),
                      out_dir=tmp_path / "two", log=logs.append)
    assert one.steps == two.steps == 2
    a, b = _tensors(tmp_path / "one"), _tensors(tmp_path / "two")
    assert a.keys() == b.keys()
    # lora_B starts at zero and lora_A from the seed: B is what training moved, A what the second step moved.
    moved = torch.cat([a[k].flatten() for k in sorted(a) if "lora_B" in k])
    apart = torch.cat([(a[k] - b[k]).flatten() for k in sorted(a) if "lora_B" in k])
    assert float(moved.norm()) > 1e-2  # the steps moved the adapter: equality below is not two untouched inits
    assert float(apart.norm() / moved.norm()) < 1e-4  # measured 2.4e-6: the order of float sums, nothing more
    # A moves only in the second step, by Adam's lr-sized first moves on gradients near zero, where the order of
    # a sum can flip a tiny component: compared as a whole (measured 1.3e-5 of its norm).
    a_all = torch.cat([a[k].flatten() for k in sorted(a) if "lora_A" in k])
    b_all = torch.cat([b[k].flatten() for k in sorted(a) if "lora_A" in k])
    assert float((a_all - b_all).norm() / a_all.norm()) < 1e-4
    steps = store.list_train_steps(run.id, 0)  # written by the launched main process, step by step
    assert [s.step for s in steps] == [1, 2] and all(s.loss is not None and s.rows == 4 for s in steps)
    assert [round(m["loss"], 5) for m in one.metrics] == pytest.approx([round(m["loss"], 5) for m in two.metrics],
                                                                       abs=1e-5)
    assert two.importance["tokens"] == one.importance["tokens"]


def test_a_batch_that_does_not_split_over_the_processes_is_refused_naming_the_settings(tmp_path: Path, tiny: Path):
    from agentlightning_cli.errors import AlightError

    store, run = new_run(tmp_path)
    record_round(store, run.id, 0)
    with pytest.raises(AlightError) as failed:
        train_round(store, run.id, 0, base_model=tiny, settings=small_settings(batch_size=3, grad_accum=1, processes=2),
                    out_dir=tmp_path / "x", log=lambda m: None)
    assert "train.batch_size 3 does not split over 2" in failed.value.message
