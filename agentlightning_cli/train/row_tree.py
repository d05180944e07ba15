"""Rows that hold a tree: a conversation's forks packed into its row, each prefix forwarded once (train.forks).

A fork (a retry, a rejected reply the harness dropped, a compaction) shares its parent's ids up to some token and
then goes its own way. As a row of its own it forwards that shared prefix again; packed, its tokens are appended
to the parent's row as a branch. The sequence is then flat but the contexts are a tree: every token has a parent
(the token before it in its own context), a position (its depth in that context) and sees only its ancestors.

A branch is (start, attach), flat indices over the row's prompt + completion: the token at `start` repeats the
token at `attach` (same id, same position, same ancestors) and the tokens after it, up to the next branch's start,
follow it. The repeat is what keeps scoring exact: a causal LM scores token s from the logits at s - 1, so the
first token of a branch must come right after a token whose context is the branch's context. The repeat is
context (never trained); it costs one token a branch.

Pure: no torch here except `attention`, which the trainer calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def parents(length: int, branches: Sequence[Sequence[int]]) -> list[int]:
    """Each flat index's parent (-1 for the root): s - 1, except at a branch's start, whose token repeats
    `attach` and so has attach's parent."""
    out = list(range(-1, length - 1))
    for start, attach in sorted(branches):
        if not 0 <= attach < start < length:
            raise ValueError(f"branch ({start}, {attach}) does not attach before its start in a row of {length}")
        out[start] = out[attach]
    return out


def positions(length: int, branches: Sequence[Sequence[int]]) -> list[int]:
    """Each flat index's position id: its depth in its own context (a branch's repeat sits where `attach` sits)."""
    up = parents(length, branches)
    out = [0] * length
    for s in range(length):
        out[s] = out[up[s]] + 1 if up[s] >= 0 else 0
    return out


def path(length: int, branches: Sequence[Sequence[int]], tip: int) -> list[int]:
    """The flat indices of `tip`'s context, root first, `tip` last: the ids a call whose reply ends at `tip` saw
    and sampled, in order."""
    up = parents(length, branches)
    out = []
    while tip >= 0:
        out.append(tip)
        tip = up[tip]
    return out[::-1]


def attention(length: int, branches: Sequence[Sequence[int]]) -> Any:
    """(length, length) bool tensor: row s is True at s and its ancestors. Built per linear run (a branch and
    the tokens that follow it): each run copies its first token's parent's row and is causal within itself."""
    import torch

    up = parents(length, branches)
    allowed = torch.zeros(length, length, dtype=torch.bool)
    bounds = sorted({0, *(start for start, _ in branches)}) + [length]
    for begin, end in zip(bounds, bounds[1:]):
        if up[begin] >= 0:
            allowed[begin:end] = allowed[up[begin]]
        allowed[begin:end, begin:end] = torch.ones(end - begin, end - begin, dtype=torch.bool).tril()
    return allowed
