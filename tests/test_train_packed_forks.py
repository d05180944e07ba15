"""Packed forks (train.forks = pack, train/row_tree.py): a fork appended to its parent's row as a branch trains
exactly what it trains as a row of its own. Checked through the trainer alight builds, on the embedded tiny model:
the round-start logprobs of every trained token, and TRL's loss and its gradient (dapo and grpo), are those of the
unpacked layout, while the packed row forwards the shared prefix once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.train import advantages as adv
from agentlightning_cli.train import row_tree
from agentlightning_cli.train.grpo import GRPORun, _as_record, build_trainer
from agentlightning_cli.train.rows import RowContext, build_rows
from agentlightning_cli.train.stored_trainer import boolean_tree_mask, tree_inputs
from train_support import loss_and_gradient, small_settings

torch = pytest.importorskip("torch")

SYSTEM = [1, 300, 301, 302, 303, 304, 305, 306, 307, 2]
TURN1, REPLY1 = [1, 310, 311, 2, 1, 312, 2], [410, 411, 412, 413, 2]
TOOL, REPLY2 = [1, 320, 321, 322, 2, 1, 312, 2], [420, 421, 422, 2]
RETRY, REPLY3 = [1, 330, 331, 2, 1, 312, 2], [430, 431, 432, 433, 434, 2]  # the harness dropped REPLY2: a fork
MORE, REPLY4 = [1, 340, 2, 1, 312, 2], [440, 441, 2]  # the forked conversation goes on
OTHER = [1, 500, 501, 502, 503, 504, 505, 2]


@dataclass
class Call:
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    id: str
    continuation: dict[str, Any] | None = None
    completion_logprobs: list[float] = field(default_factory=list)
    status: str = "ok"
    sampling: dict[str, Any] = field(default_factory=lambda: {"temperature": 1.0})
    model: str | None = None

    def __post_init__(self):
        self.completion_logprobs = [-3.0] * len(self.completion_token_ids)


def exact(call: Call, kind: str, chain: str, reason: str | None = None, parent: str | None = None) -> Call:
    call.continuation = {"mode": "exact", "kind": kind, "reason": reason, "chain": chain, "parent": parent}
    return call


def episode_calls() -> list[Call]:
    first = SYSTEM + TURN1
    second = first + REPLY1 + TOOL
    forked = first + REPLY1 + RETRY
    return [exact(Call(first, REPLY1, "a1"), "start", "c1"),
            exact(Call(second, REPLY2, "a2"), "continue", "c1"),
            exact(Call(forked, REPLY3, "f1"), "fork", "c2", "dropped_reply", "c1"),
            exact(Call(forked + REPLY3 + MORE, REPLY4, "f2"), "continue", "c2")]


def layout(pack: bool) -> list[Any]:
    """Episode x: a conversation and its fork (one packed row, or two rows); episode y: one row."""
    ctx = RowContext(pack_forks=pack)
    rows = build_rows("x", episode_calls(), ctx).rows
    other = exact(Call(OTHER, [600, 601, 602, 2], "b1"), "start", "c9")
    return rows + build_rows("y", [other], ctx).rows


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_a_packed_fork_forwards_the_shared_prefix_once_and_keeps_every_context():
    packed, rows = layout(True), layout(False)
    assert [r.call_ids for r in packed] == [["a1", "a2", "f1", "f2"], ["b1"]]
    assert [r.call_ids for r in rows] == [["a1", "a2"], ["f1", "f2"], ["b1"]]
    host = packed[0]
    attach = len(SYSTEM + TURN1 + REPLY1) + 1 - 1  # RETRY shares TOOL's first id ("<|im_start|>")
    assert host.branches == [(len(SYSTEM + TURN1 + REPLY1 + TOOL + REPLY2), attach)]
    ids = host.prompt_ids + host.completion_ids
    tip = len(ids) - 1
    assert [ids[i] for i in row_tree.path(len(ids), host.branches, tip)] == rows[1].prompt_ids + rows[1].completion_ids
    assert host.trained_tokens == rows[0].trained_tokens + rows[1].trained_tokens
    assert host.length == rows[0].length + rows[1].length - (attach + 1) + 1  # the shared prefix once, one repeat
    positions = row_tree.positions(len(ids), host.branches)
    assert positions[host.branches[0][0]] == attach and positions[-1] == rows[1].length - 1


def test_tree_inputs_mask_padding_and_contexts():
    padding = torch.tensor([[0, 1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0]])
    mask, positions = tree_inputs(padding, [[[4, 1]], []], torch.float32, True)
    assert mask.shape == (2, 1, 7, 7)
    row = mask[0, 0]
    # flat 0..4 of the first row sit at 1..5: index 4 repeats index 1 (sees index 0 and itself, not 1..3)
    assert row[5].tolist() == [False, True, False, False, False, True, False]
    assert row[4].tolist() == [False, True, True, True, True, False, False]
    assert positions[0].tolist() == [0, 0, 1, 2, 3, 1, 0] and positions[1].tolist() == [0, 1, 2, 0, 0, 0, 0]
    assert all(mask[i, 0, j, j] for i in range(2) for j in range(7))  # padding attends to itself: no empty row
    additive, _ = tree_inputs(padding, [[[4, 1]], []], torch.float32, False)
    assert torch.equal(additive == 0, mask)


def trained_logps(tiny: Path, tmp_path: Path, pack: bool) -> list[list[float]]:
    settings = small_settings(batch_size=4, grad_accum=1, importance_sampling="none")
    rows = layout(pack)
    trainer, _ = build_trainer(GRPORun(base_model=tiny, rows=rows, out_dir=tmp_path, settings=settings.train,
                                       temperature=1.0, rank=8))
    assert trainer.tree_round is pack
    records = [_as_record(r) for r in rows]
    return [[lp for lp, m in zip(logps, r.mask) if m] for logps, r in zip(trainer.round_start_logps(records), rows)]


def test_packed_rows_score_every_trained_token_as_its_own_row_does(tiny: Path, tmp_path: Path):
    packed = trained_logps(tiny, tmp_path / "a", True)
    rows = trained_logps(tiny, tmp_path / "b", False)
    flat_packed, flat_rows = torch.tensor(packed[0] + packed[1]), torch.tensor(rows[0] + rows[1] + rows[2])
    assert len(flat_packed) == len(flat_rows) == 22
    assert torch.allclose(flat_packed, flat_rows, atol=2e-5), (flat_packed - flat_rows).abs().max()
    # ... and not by accident: the fork's reply scored without the tree (the flat sequence as one context) differs
    host = layout(True)[0]
    host.branches = []
    settings = small_settings(batch_size=4, grad_accum=1, importance_sampling="none")
    trainer, _ = build_trainer(GRPORun(base_model=tiny, rows=[host], out_dir=tmp_path / "c",
                                       settings=settings.train, temperature=1.0, rank=8))
    flat = trainer.round_start_logps([_as_record(host)])[0]
    linear = torch.tensor([lp for lp, m in zip(flat, host.mask) if m])
    assert (linear[9:15] - flat_rows[9:15]).abs().max() > 1e-3


def packed_loss(tiny: Path, tmp_path: Path, loss_type: str, pack: bool) -> tuple[float, Any]:
    scored = adv.group_advantages({"x": ("t", 1.0), "y": ("t", 0.0)}, "none")
    loss, grad, _ = loss_and_gradient(tiny, tmp_path, adv.apply(layout(pack), scored, loss_type), loss_type)
    return loss, grad


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_packing_a_fork_leaves_the_loss_and_its_gradient_unchanged(tiny: Path, tmp_path: Path, loss_type: str):
    packed, packed_grad = packed_loss(tiny, tmp_path / "a", loss_type, True)
    rows, rows_grad = packed_loss(tiny, tmp_path / "b", loss_type, False)
    assert rows_grad.abs().max() > 1e-4
    assert packed == pytest.approx(rows, rel=1e-4, abs=1e-7)
    assert torch.allclose(packed_grad, rows_grad, rtol=1e-3, atol=1e-6), float((packed_grad - rows_grad).abs().max())


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_packed_mask_gives_each_branch_its_own_context_under_sdpa_and_eager(tiny: Path, attention: str):
    """The model's own forward under each attention implementation the trainer supports: the fork's tokens, scored
    in the packed row (bool mask for SDPA, additive for eager, positions along the tree), get the logits they get in
    their own row."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny), attn_implementation=attention, dtype=torch.float32).eval()
    host, own = layout(True)[0], layout(False)[1]
    packed = torch.tensor([host.prompt_ids + host.completion_ids])
    mask, positions = tree_inputs(torch.ones_like(packed), [host.branches], torch.float32, attention != "eager")
    with torch.no_grad():
        tree = model(input_ids=packed, attention_mask=mask, position_ids=positions).logits[0]
        alone = model(input_ids=torch.tensor([own.prompt_ids + own.completion_ids])).logits[0]
    start = host.branches[0][0]
    branch = tree[start:]  # the repeat and everything after it: the fork's ids from its last shared token on
    assert torch.allclose(branch, alone[len(alone) - len(branch):], atol=1e-4)
    flat = model(input_ids=packed).logits[0].detach()
    assert not torch.allclose(flat[start:], branch, atol=1e-2)  # without the tree the branch reads another context


def test_an_attention_that_would_not_apply_the_tree_mask_is_refused():
    from agentlightning_cli.errors import AlightError

    assert boolean_tree_mask("sdpa") is True and boolean_tree_mask("eager") is False
    for other in ("flash_attention_2", "flex_attention", None):
        with pytest.raises(AlightError, match="packed forks need sdpa or eager attention") as caught:
            boolean_tree_mask(other)
        assert "train.forks: row" in caught.value.hint
