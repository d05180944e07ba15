"""The weighting rule (train/advantages.py): splitting an episode's calls into one row or two never changes its
loss. Checked on TRL's own loss (`_compute_loss`, through the trainer alight builds) and its gradient, on the
embedded tiny model, for each loss type that normalises differently: dapo (tokens of the batch), grpo (mean
per row, then over rows), dr_grpo (rows x max_completion_length)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.train import advantages as adv
from agentlightning_cli.train.rows import Row
from train_support import loss_and_gradient

torch = pytest.importorskip("torch")

PROMPT = [1, 300, 301, 302, 303, 2]
FIRST, GAP, SECOND = [410, 411, 412], [2, 1, 350, 351, 2], [420, 421, 422, 423, 424, 425]  # 3 and 6 trained tokens
OTHER_PROMPT, OTHER = [1, 600, 601, 602, 603, 604, 605, 606, 607, 608, 609, 2], [610, 611, 612, 613]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def layout(split: bool) -> list[Row]:
    """Episode x (advantage +1: FIRST, a tool result, SECOND) as one row or as two; episode y (-1) one row."""
    if split:
        x = [Row("x", PROMPT, FIRST, [1] * 3, [-3.0] * 3),
             Row("x", PROMPT + FIRST + GAP, SECOND, [1] * 6, [-3.0] * 6)]
    else:
        x = [Row("x", PROMPT, FIRST + GAP + SECOND, [1] * 3 + [0] * 5 + [1] * 6, [-3.0] * 3 + [0.0] * 5 + [-3.0] * 6)]
    return x + [Row("y", OTHER_PROMPT, OTHER, [1] * 4, [-3.0] * 4)]


def weighted_loss(tiny: Path, tmp_path: Path, loss_type: str, split: bool) -> tuple[float, Any]:
    scored = adv.group_advantages({"x": ("t", 1.0), "y": ("t", 0.0)}, "none")  # advantages +0.5 / -0.5
    # The same number of rows in both layouts (one padding row fewer when split): grpo and dr_grpo divide by it.
    loss, grad, trainer = loss_and_gradient(tiny, tmp_path, adv.apply(layout(split), scored, loss_type), loss_type)
    clipped = trainer._metrics["train"]["clip_ratio/region_mean"][-1]
    assert 0 < clipped < 1, clipped
    return loss, grad


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_splitting_an_episode_into_two_rows_leaves_its_loss_and_gradient_unchanged(tiny: Path, tmp_path: Path,
                                                                                 loss_type: str):
    whole, whole_grad = weighted_loss(tiny, tmp_path / "a", loss_type, split=False)
    split, split_grad = weighted_loss(tiny, tmp_path / "b", loss_type, split=True)
    assert whole_grad.abs().max() > 1e-4  # (grpo's loss is 0 at ratio 1: the advantages sum to 0, once each)
    assert split == pytest.approx(whole, rel=1e-4, abs=1e-7)
    assert torch.allclose(split_grad, whole_grad, rtol=1e-3, atol=1e-6), float((split_grad - whole_grad).abs().max())
