"""Task-clustered bootstrap intervals (rollout/intervals.py) and the adapter base check (serve/given_adapter.py):
pure Python, no server."""

from __future__ import annotations

import json

import pytest

from agentlightning_cli.errors import AlightError
from agentlightning_cli.rollout.intervals import paired_interval, task_interval
from agentlightning_cli.serve.given_adapter import check_adapter_base, model_identity


def test_tasks_not_attempts_are_resampled():
    # 10 tasks x 8 attempts: 5 tasks always solved, 5 never. As 80 independent attempts the interval is about
    # +-0.11; as 10 tasks (the attempts of a task move together) about +-0.3.
    per_task = [1.0] * 5 + [0.0] * 5
    per_attempt = [v for v in per_task for _ in range(8)]
    by_task, by_attempt = task_interval(per_task), task_interval(per_attempt)
    assert by_task.estimate == by_attempt.estimate == 0.5
    assert by_task.low < 0.25 and by_task.high > 0.75
    assert 0.35 < by_attempt.low < 0.45 and 0.55 < by_attempt.high < 0.65
    assert (by_task.high - by_task.low) > 2 * (by_attempt.high - by_attempt.low)


def test_interval_is_reproducible_and_follows_the_seed():
    values = [0.0, 0.25, 0.5, 1.0, 1.0, 0.75, 0.0, 0.5]
    assert task_interval(values) == task_interval(values)
    assert task_interval(values, seed=1) != task_interval(values)
    one = task_interval([0.5])
    assert (one.estimate, one.low, one.high) == (0.5, 0.5, 0.5)
    assert task_interval([]) is None


def test_paired_difference_is_tight_when_the_arms_move_together():
    # Tasks differ a lot in difficulty, the second arm adds 0.25 on every task: the paired interval of the
    # difference is a point, while the two arms' own intervals overlap widely.
    first = [0.0, 0.0, 0.25, 0.5, 0.75, 0.0, 0.25, 0.5]
    second = [v + 0.25 for v in first]
    diff = paired_interval(first, second)
    assert diff.estimate == pytest.approx(0.25) and diff.low == pytest.approx(0.25) and diff.high == pytest.approx(0.25)
    a, b = task_interval(first), task_interval(second)
    assert a.high > b.low  # unpaired, the arms are not told apart
    mixed = paired_interval([1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0])
    assert mixed.estimate == 0.0 and mixed.low < 0 < mixed.high
    with pytest.raises(ValueError):
        paired_interval([1.0], [1.0, 0.0])


def _adapter(folder, base):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base), "r": 4}))
    (folder / "adapter_model.safetensors").write_bytes(b"")
    return folder


def test_adapter_base_by_identity(tmp_path):
    # A built-in's folder under another ALIGHT_HOME is the same model; another built-in or Hub model is not.
    served = tmp_path / "home-a" / "models" / "tiny-2"
    served.mkdir(parents=True)
    ok = _adapter(tmp_path / "ok", tmp_path / "home-b" / "models" / "tiny-2")
    assert check_adapter_base(ok, served) == ok.resolve()
    assert check_adapter_base(ok, "tiny-2") == ok.resolve()  # an --upstream serving it under its folder name
    wrong = _adapter(tmp_path / "wrong", tmp_path / "home-b" / "models" / "smollm2-135m-instruct-1")
    with pytest.raises(AlightError) as err:
        check_adapter_base(wrong, served)
    assert "smollm2-135m-instruct-1" in err.value.message and "tiny-2" in err.value.message
    assert "--model" in err.value.hint
    hub = tmp_path / "hf" / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "snapshots" / "abc123"
    assert model_identity(hub) == model_identity("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert model_identity(hub) != model_identity(tmp_path / "models" / "smollm2-135m-instruct-1")
    # Same name, different shape (both configs readable): refused.
    other = tmp_path / "elsewhere" / "tiny-2"
    other.mkdir(parents=True)
    (served / "config.json").write_text(json.dumps({"hidden_size": 64}))
    (other / "config.json").write_text(json.dumps({"hidden_size": 128}))
    with pytest.raises(AlightError):
        check_adapter_base(_adapter(tmp_path / "shape", other), served)
    with pytest.raises(AlightError, match="no adapter_config.json"):
        check_adapter_base(tmp_path / "missing", served)
