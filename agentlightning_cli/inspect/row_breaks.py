"""An episode's training rows as the trainer builds them, with where and why each row's token prefix broke.

Built by the trainer's own function (train/rows.build_rows) from the stored token ids: error calls, calls without
ids or logprobs, the harness's helper calls, greedy (temperature 0), penalised or constrained calls and all but
the last of a retried prompt train nothing; a call joins the row when its prompt continues the previous call's
prompt + reply (strict) or its prompt (splice, when the round trained that way); one row trains under one sampling
setting and within the row limit. Nothing is re-tokenised.

For each break it says where the ids diverge (which token; in the earlier history, in the previous reply, or the
prompt stops short), the ids on both sides and the reply token's text when vLLM's answer was stored (tokens.py), and
why: the trainer's own label when the round was trained (template / retokenised / edited / other, kept in
train_rounds.detail["breaks"]), and what the position alone tells. rows.py is the quick version for call lists
(from summaries, strict rule only); this one reads the episode's calls and runs when asked for (`t`, `show`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentlightning_cli.inspect.rows import Row, Rows
from agentlightning_cli.inspect.tokens import completion_token_texts, end_of_turn_ids, run_tokenizer_file
from agentlightning_cli.store import Call, Store
from agentlightning_cli.train.rows import BREAK_REASONS, RowContext, build_rows, call_sampling, call_temperature, is_greedy
from agentlightning_cli.train.helper_calls import harness_model, is_helper
from agentlightning_cli.train.rows import Row as TrainRow
from agentlightning_cli.train.sampling import call_constraints, is_penalised

_CHUNK = 512


def first_difference(a: list[int], b: list[int]) -> int:
    """The first index where `a` and `b` differ (the shorter length when one is a prefix of the other). Compares
    slices a chunk at a time: a 30,000-token prompt is a few C-speed comparisons, not a Python loop over ids."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i:i + _CHUNK] == b[i:i + _CHUNK]:
        i += _CHUNK
    i = min(i, n)
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _dropped_reason(call: Call, kept_ids: set[str], calls: list[Call], harness_model: str | None = None) -> str:
    """Why usable_calls left `call` out (same checks, same order)."""
    if call.status != "ok":
        return f"status {call.status}: error calls train nothing"
    if is_helper(call, harness_model):
        return (f"helper call: it asked for model {call.client_model!r}, not the harness's {harness_model!r};"
                " not trained (train.helper_calls: skip)")
    if not call.prompt_token_ids or not call.completion_token_ids:
        return "no token ids recorded"
    if call.completion_logprobs is None or len(call.completion_logprobs) != len(call.completion_token_ids):
        return "no sampling logprobs for its tokens"
    if is_greedy(call):
        return "sampled at temperature 0 (greedy): the argmax is not a sample of the policy, so it is never trained"
    if is_penalised(call_sampling(call)):
        return "sampled with a presence/frequency/repetition penalty: its logprobs are not the policy's, never trained"
    constrained = call_constraints(call)
    if constrained:
        return (f"sampled under a constraint ({', '.join(constrained)}): vLLM masked or forced tokens before its"
                " logprobs, so they are not the policy's; never trained")
    later = next((c for c in calls if c.seq > call.seq and c.id in kept_ids), None)
    return (f"retried prompt: call {later.seq} sent the same prompt ids again and trains instead"
            if later is not None else "retried prompt")


def _explain(prev: Call, call: Call, texts: list[str] | None) -> dict[str, Any]:
    prompt, reply, new = list(prev.prompt_token_ids), list(prev.completion_token_ids), list(call.prompt_token_ids)
    seen = prompt + reply
    at = first_difference(seen, new)
    out: dict[str, Any] = {"previous_call": prev.seq, "matched": at, "expected": len(seen), "at": at,
                           "expected_id": seen[at] if at < len(seen) else None,
                           "got_id": new[at] if at < len(new) else None, "expected_text": None}
    head = (f"call {call.seq}'s prompt diverges from call {prev.seq}'s prompt + completion at token {at} of"
            f" {len(seen)}")
    if at >= len(new):
        out["where"] = "short"
        out["cause"] = (f"the prompt ends after {len(new)} tokens, inside call {prev.seq}'s"
                        f" {'reply' if at >= len(prompt) else 'prompt'}: the conversation was cut back")
    elif at < len(prompt):
        out["where"] = "history"
        out["cause"] = (f"in call {prev.seq}'s prompt (token {at} of {len(prompt)}): earlier history was changed —"
                        " a message edited, dropped or compacted, or an injected reminder")
    else:
        j = at - len(prompt)
        out["where"] = "reply"
        out["reply_token"] = j
        if texts is not None:
            out["expected_text"] = texts[j]
        last = " (its last token: the turn is closed with other ids)" if j == len(reply) - 1 else ""
        out["cause"] = (f"in call {prev.seq}'s reply (sampled token {j} of {len(reply)}{last}): the client resent"
                        " the reply as other ids — re-serialised (tool-call JSON, thinking dropped by the chat"
                        " template) or re-tokenised from text")
    out["reason"] = f"{head}: {out['cause']}"
    return out


def episode_rows(calls: list[Call], merge: str = "strict", trainer_breaks: dict[str, str] | None = None,
                 max_tokens: int | None = None, eot_ids: frozenset[int] = frozenset(),
                 harness_model: str | None = None) -> Rows:
    """`calls` in seq order (store.get_calls); `trainer_breaks` maps call id -> the trainer's break label;
    `max_tokens`: the run's row limit (train.max_row_tokens, else serve.max_model_len), None when unknown;
    `eot_ids`: the model's end-of-turn ids, which the splice rule cuts after (tokens.end_of_turn_ids);
    `harness_model`: calls asking for another model name are helper calls, left out (train/helper_calls.py).
    The rows are the trainer's own (train/rows.build_rows); this adds where and why each one started."""
    trainer_breaks = trainer_breaks or {}
    report = build_rows("", calls, RowContext(eot_ids=eot_ids, max_tokens=max_tokens, harness_model=harness_model),
                        merge)
    built = report.built
    by_id = {c.id: c for c in calls}
    kept_ids = {cid for row in built for cid in row.call_ids}
    kept = [c for c in calls if c.id in kept_ids]
    previous = {later.id: earlier for earlier, later in zip(kept, kept[1:])}
    skipped = {c.seq: _dropped_reason(c, kept_ids, calls, harness_model) for c in calls if c.id not in kept_ids}
    rows: list[Row] = []
    details: dict[int, dict[str, Any]] = {}
    texts: dict[int, list[str] | None] = {}
    for index, trained in enumerate(built):
        first = by_id[trained.call_ids[0]]
        row = Row(index=index, calls=[by_id[c].seq for c in trained.call_ids], tokens=trained.length,
                  sampled=trained.trained_tokens, merge=trained.merge, branches=len(trained.branches))
        if trained.split is not None:
            prev = previous[first.id]
            if trained.split in BREAK_REASONS:
                if prev.seq not in texts:
                    texts[prev.seq] = completion_token_texts(prev)
                detail = _explain(prev, first, texts[prev.seq])
                detail["trainer_reason"] = trainer_breaks.get(first.id)
            else:
                detail = {"previous_call": prev.seq, "where": trained.split, "trainer_reason": None,
                          "reason": _split_reason(trained.split, first, built[index - 1], max_tokens)}
            row.break_reason, row.break_matched = detail["reason"], detail.get("matched")
            row.break_expected = detail.get("expected")
            details[index] = detail
        if max_tokens is not None and trained.length > max_tokens:
            row.dropped = f"longer than the run's row limit of {max_tokens} tokens: the trainer drops it (never truncates)"
        rows.append(row)
    out = Rows(rows, skipped, merge=merge)
    out.details = details
    counts = report.counts
    if trainer_breaks:  # a prefix break by the trainer's label where it recorded one (it decodes; this does not)
        counts.breaks = Counter(b["reason"] if "/" in b["reason"] else trainer_breaks.get(b["call_id"], b["reason"])
                                for b in report.break_log)
    out.counts = counts.to_dict()
    return out


def _split_reason(split: str, call: Call, before: TrainRow, max_tokens: int | None) -> str:
    """Why a call whose prompt continues the row before still starts a new one (or, for an exactly continued
    call, why the proxy gave it a row of its own)."""
    kind, _, why = split.partition("/")
    if kind == "start":
        return f"call {call.seq} opened another conversation (it shares no turn after the system text with any)"
    if kind in ("fork", "fallback"):
        from agentlightning_cli.proxy.continuation.chains import FORK_REASONS

        told = FORK_REASONS.get(why, why) if kind == "fork" else why
        return f"call {call.seq} is a {kind} ({why}): {told}"
    if split == "temperature":
        return (f"call {call.seq} was sampled at temperature {call_temperature(call)}, the row at"
                f" {before.temperature}: one row trains at one temperature")
    if split == "sampling":
        return (f"call {call.seq} was sampled with other filters (top_p/top_k/min_p) than the row: one row is scored"
                " under one distribution")
    return f"call {call.seq} would grow the row past {max_tokens} tokens (the run's row limit): a new row starts"


def stored_episode_rows(store: Store, episode_id: str, run_id: str | None, round_index: int | None) -> Rows:
    """The episode's rows from its stored calls, by the merge rule its round trained with (strict when it has not
    been trained), labelled with the trainer's break reasons when it recorded them."""
    trained = store.get_train_round(run_id, round_index) if run_id is not None and round_index is not None else None
    breaks = {b["call_id"]: b["reason"] for b in (trained.detail.get("breaks") or []) if trained is not None
              and b.get("episode_id") == episode_id} if trained is not None else {}
    run = store.get_run(run_id) if run_id is not None else None
    merge = trained.merge_rule if trained else "strict"
    eot: frozenset[int] = frozenset()
    note = None
    if merge == "splice":  # needs the model's end-of-turn ids: from its tokenizer files, when on this machine
        path = run_tokenizer_file(run.config if run else None)
        eot = end_of_turn_ids(path) if path is not None else frozenset()
        if not eot:
            note = ("this round trained with the splice rule, which needs the model's end-of-turn ids; its tokenizer"
                    " is not on this machine, so rows here join by the strict rule only")
    rows = episode_rows(store.get_calls(episode_id), merge, breaks, row_limit(run.config if run else None), eot,
                        skipped_helpers(run.config if run else None))
    rows.note = note
    return rows


def skipped_helpers(run_config: dict[str, Any] | None) -> str | None:
    """The harness's model name when the run leaves its helper calls out of training (train.helper_calls: skip,
    the default), else None (no call is dropped as a helper)."""
    settings = (run_config or {}).get("settings") or {}
    if (settings.get("train") or {}).get("helper_calls", "skip") == "train":
        return None
    return harness_model(run_config)


def row_limit(run_config: dict[str, Any] | None) -> int | None:
    """The run's train.max_row_tokens, else its serve.max_model_len (what the trainer uses), from the settings
    snapshot (run_snapshot.py); None when not recorded."""
    from agentlightning_cli.run_snapshot import row_limit as recorded_limit

    return recorded_limit(run_config)[0]
