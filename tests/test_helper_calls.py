"""The helper-call rule on stored calls (train/helper_calls.py): a call that asked for another model name than the
run's harness (recorded in the run's snapshot) is a helper call, left out of training and counted unless
`train.helper_calls: train`; inspect says why it trains nothing. Real SQLite store, the trainer on the tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from train_support import call_record

from agentlightning_cli.inspect.row_breaks import stored_episode_rows
from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.store import Store
from agentlightning_cli.train.helper_calls import harness_model
from agentlightning_cli.train.rows import RowContext, build_rows

HELPER = "gemini-3-pro-preview"


def _record(store: Store, config: dict, rewards: tuple[float, ...] = (0.0, 1.0)) -> tuple[object, list[str]]:
    """A run whose round has one episode per reward, each: the agent's call (model `policy`), a helper call
    sampled freely at temperature 1 (another name, unconstrained: only the label tells), the agent's next call."""
    run = store.create_run("r", config)
    rnd = store.create_round(run.id, 0, "policy-r0", None)
    episodes = []
    for attempt, reward in enumerate(rewards):
        ep = store.create_episode(run.id, rnd.id, "t", attempt, "gemini-cli", f"k{attempt}")
        prompt = [1, 5, 6, 7 + attempt]
        first = call_record(ep.id, prompt, [11, 12, 2])
        helper = call_record(ep.id, [1, 9, 9, 9], [13, 14, 2])
        second = call_record(ep.id, prompt + [11, 12, 2, 8], [15, 16, 2])
        for record, model in ((first, "policy"), (helper, HELPER), (second, "policy")):
            record.client_model = model
            store.add_call(record)
        store.update_episode(ep.id, status="done", outcome="finished", reward=reward)
        episodes.append(ep.id)
    return run, episodes


def test_a_call_asking_for_another_model_name_is_a_helper_left_out_unless_trained(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "run")
    try:
        run, [ep, _] = _record(store, {"harness": "gemini-cli", "harness_model": "policy"})
        calls = store.get_calls(ep)
        assert harness_model(store.get_run(run.id).config) == "policy" and harness_model({}) is None
        skipped = build_rows(ep, calls, RowContext(harness_model="policy"))
        assert skipped.dropped == {"helper_calls": 1}
        assert [row.call_ids for row in skipped.rows] == [[calls[0].id, calls[2].id]]  # one row: the agent's
        kept = build_rows(ep, calls, RowContext(harness_model="policy", train_helpers=True))
        assert not kept.dropped and calls[1].id in {c for row in kept.rows for c in row.call_ids}
        assert not build_rows(ep, calls, RowContext()).dropped  # no harness model recorded: no helpers
        rows = stored_episode_rows(store, ep, run.id, 0).to_json()
        why = f"helper call: it asked for model {HELPER!r}, not the harness's 'policy'; not trained"
        assert rows["skipped"] == [{"call": 1, "reason": why + " (train.helper_calls: skip)"}]
    finally:
        store.close()


def test_alight_train_counts_helper_calls_and_trains_the_agents(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "run")
    try:
        _record(store, {"harness": "gemini-cli", "harness_model": "policy"})
    finally:
        store.close()
    tiny = build_tiny_model(tmp_path / "tiny")
    proc = subprocess.run([sys.executable, "-m", "agentlightning_cli", "train", str(tmp_path / "run"), "--round", "0",
                           "--base-model", str(tiny), "--json"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["dropped"].get("helper_calls") == 2 and report["calls"] == 4, report
    assert "left out 2 helper calls: helper calls of the harness" in proc.stderr, proc.stderr
