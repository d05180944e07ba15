"""Typed rows of the store: what callers read and write. No SQL here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Run:
    """One `alight run`: a name the user picks, the settings it ran with, and where it stands."""

    id: str
    name: str
    config: dict[str, Any]
    created_at: float
    status: str


@dataclass(frozen=True)
class Round:
    """One round of a run: every episode in it is served by the same policy (LoRA adapter name)."""

    id: str
    run_id: str
    index: int
    policy: str
    adapter_path: str | None
    status: str
    started_at: float
    ended_at: float | None
    kind: str = "train"
    """`train` (its episodes are trained on) or `eval` (a held-out evaluation of the policy after `index`
    trainings, never trained on; m008)."""


@dataclass(frozen=True)
class Episode:
    """One harness process working on one task attempt; its key is stored only as a hash."""

    id: str
    run_id: str | None
    round_id: str | None
    task_id: str | None
    attempt: int
    harness: str | None
    status: str
    reward: float | None
    reward_detail: dict[str, Any] | None
    created_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    error: str | None
    workspace: str | None
    outcome: str | None
    outcome_detail: dict[str, Any] | None = None
    """What the runner saw besides the ending: {"sandbox": {"mode": "bwrap", "peak": ..., "proxy": ...} or "none",
    "leftover_processes_killed": n}; None before the harness ended (or for stores older than m006)."""


# kw_only so that Call can extend CallRecord with required fields, and so the proxy's constructor calls
# stay readable (there are many fields and a positional slip would silently swap two of them).
@dataclass(kw_only=True)
class CallRecord:
    """Everything the proxy knows about one model call, as it will be stored. Bytes are exact wire bytes."""

    episode_id: str
    protocol: str  # "openai-chat" | "anthropic-messages" | "openai-responses" | "other"
    method: str
    path: str  # after the /e/<episode> prefix, with the query string
    status: str  # "ok" | "partial" | "bad_request" | "client_error" | "upstream_error" | "unreachable" | "internal_error" | ...
    http_status: int  # what the client got
    stream: bool
    client_request: bytes
    started_at: float
    ended_at: float
    client_headers: dict[str, str] = field(default_factory=dict)  # minus authorization / x-api-key
    upstream_request: bytes | None = None
    response: bytes | None = None  # what the client saw (streams: the whole SSE byte stream)
    upstream_response: bytes | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None  # one per completion token, stored as exact float64
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    client_model: str | None = None
    model: str | None = None  # policy / adapter name sent upstream
    sampling: dict[str, Any] | None = None
    dropped: dict[str, Any] | None = None
    continuation: dict[str, Any] | None = None  # exact continuation's decision and generate params (m009)
    first_byte_at: float | None = None
    error: str | None = None


@dataclass(kw_only=True)
class Call(CallRecord):
    """A stored CallRecord: `seq` is 0, 1, 2, ... within its episode, assigned atomically on write."""

    id: str
    seq: int


class StoredCall(NamedTuple):
    """Where a call went: what `Store.add_calls(..., full=False)` returns instead of whole Call objects."""

    id: str
    seq: int
