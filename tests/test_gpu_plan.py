"""The GPU plan (serve/gpu_plan.py), computed without a GPU: where vLLM and the trainer run, vLLM's share of a
shared GPU, the up-front refusal when both cannot fit, what each process is given, the GPUs as nvidia-smi lists
them, and the message a trainer out of GPU memory ends with."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from train_support import new_run, record_round, small_settings

from agentlightning_cli.config import Settings
from agentlightning_cli.errors import AlightError
from agentlightning_cli.serve import gpu_plan
from agentlightning_cli.serve.gpu_plan import GIB, Gpu, plan, visible_gpus

H100 = 80 * GIB
MODEL_7B = 15 * GIB


def gpus(n: int, total: int = H100) -> list[Gpu]:
    return [Gpu(str(i), total, "H100") for i in range(n)]


def settings(**serve) -> Settings:
    s = Settings()
    for key, value in serve.items():
        setattr(s.serve, key, value)
    return s


def test_replicas_take_a_tensor_parallel_group_each_and_too_few_gpus_are_refused():
    from agentlightning_cli.serve.policy import replica_devices

    p = plan(gpus(8), settings(replicas=2, tensor_parallel_size=2), MODEL_7B, trains=True)
    assert p.serve_devices == ["0", "1", "2", "3"] and p.train_device == "7" and not p.shared
    assert replica_devices(p.serve_devices, 2) == [["0", "1"], ["2", "3"]]
    assert replica_devices([], 3) == [None, None, None]  # CPU: nothing to split
    with pytest.raises(AlightError, match="needs 4 GPU"):
        plan(gpus(8), settings(replicas=2, tensor_parallel_size=2, devices=[0, 1, 2]), MODEL_7B, trains=True)
    with pytest.raises(AlightError, match="evenly"):
        replica_devices(["0", "1", "2"], 2)


def test_one_gpu_is_shared_with_sleep_mode_by_default():
    p = plan(gpus(1), settings(), MODEL_7B, trains=True)
    assert (p.serve_devices, p.train_device, p.shared, p.sleep, p.gpu_memory_utilization) == (["0"], "0", True, True, 0.9)
    assert any("sleeps while the trainer trains" in line for line in p.lines)


def test_one_gpu_without_sleep_leaves_the_trainer_its_share_or_refuses_up_front():
    p = plan(gpus(1), settings(sleep_between_rounds="off"), MODEL_7B, trains=True)
    assert not p.sleep and 0.5 < p.gpu_memory_utilization < 0.7
    assert (1 - p.gpu_memory_utilization) * H100 >= MODEL_7B * 1.5 + gpu_plan.CONTEXT_BYTES
    with pytest.raises(AlightError) as err:
        plan(gpus(1, 32 * GIB), settings(sleep_between_rounds="off"), MODEL_7B, trains=True)
    assert "15.0 GiB of weights on a 32 GiB GPU" in err.value.message
    assert "vLLM at gpu_memory_utilization 0.22 leaves 25.0 GiB" in err.value.message
    assert "serve.sleep_between_rounds: on" in err.value.hint and "train.devices" in err.value.hint
    # Where the trainer alone needs more than the GPU, no fraction can help (none is computed below 0) and sleep
    # mode cannot either: the refusal says so.
    with pytest.raises(AlightError) as err:
        plan(gpus(1, 24 * GIB), settings(sleep_between_rounds="off"), MODEL_7B, trains=True)
    assert err.value.message.startswith("the trainer alone does not fit this GPU: 15.0 GiB of weights on a 24 GiB")
    assert "24.5 GiB" in err.value.message and "-0." not in err.value.message and "train.devices" in err.value.hint
    with pytest.raises(AlightError, match="does not fit this GPU"):
        plan(gpus(1, 16 * GIB), settings(), MODEL_7B, trains=True)  # not even with sleep mode
    with pytest.raises(AlightError, match="leaves 8.0 GiB"):  # a fraction set too high is refused, not tried
        plan(gpus(1), settings(sleep_between_rounds="off", gpu_memory_utilization=0.9), MODEL_7B, trains=True)


def test_the_trainer_estimate_grows_with_the_tokens_of_a_pass_and_the_refusal_names_the_rows(tmp_path):
    shape = (28, 3584)  # Qwen2.5-7B
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 28, "hidden_size": 3584}))
    assert gpu_plan.model_shape(tmp_path) == shape
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 4, "hidden_size": 8}}))
    assert gpu_plan.model_shape(tmp_path) == (4, 8) and gpu_plan.model_shape(tmp_path / "none") is None
    s = settings(max_model_len=16384)
    s.train.batch_size = 4
    needs, how = gpu_plan.trainer_bytes(s, MODEL_7B, shape)
    assert needs == MODEL_7B + 8 * 28 * 3584 * 4 * 16384 + gpu_plan.CONTEXT_BYTES
    assert "4 row(s) x 16384 tokens per pass" in how
    s.train.max_row_tokens = 8192  # the row limit wins over the server's context
    assert gpu_plan.trainer_bytes(s, MODEL_7B, shape)[0] == MODEL_7B + 8 * 28 * 3584 * 4 * 8192 + gpu_plan.CONTEXT_BYTES
    s.train.max_row_tokens = None
    p = plan(gpus(1), s, MODEL_7B, trains=True, shape=shape)  # 15 + 49 + 2 GiB on 80: fits while vLLM sleeps
    assert p.sleep and any("activations for 4 row(s) x 16384 tokens" in line for line in p.lines)
    s.train.batch_size = 8  # 15 + 98 + 2 GiB: refused before anything starts, with the rows to lower
    with pytest.raises(AlightError) as err:
        plan(gpus(1), s, MODEL_7B, trains=True, shape=shape)
    assert "8 row(s) x 16384 tokens per pass" in err.value.message and "train.batch_size" in err.value.hint
    with pytest.raises(AlightError) as err:  # weights alone past the GPU: fewer rows would not help, so not offered
        plan(gpus(1), s, 90 * GIB, trains=True, shape=shape)
    assert "train.batch_size" not in err.value.hint and "smaller model" in err.value.hint


def test_the_trainer_estimate_stays_above_what_an_h200_measured():
    # bench/results/gpu.json: a Qwen2.5-7B-shaped model trained on an H200 at 4k to 32k tokens per pass, and a 1B
    # one. The plan's estimate must cover every measured peak (what PyTorch reserved) and the CUDA context itself,
    # which PyTorch does not count (~0.5 GiB on that machine).
    context = 512 * 2 ** 20
    results = json.loads((Path(__file__).resolve().parents[1] / "bench" / "results" / "gpu.json").read_text())
    big = results["memory_by_tokens_7b"]
    assert len(big["runs"]) >= 3
    for run in big["runs"]:
        s = settings(max_model_len=run["row_tokens"])
        s.train.batch_size = run["rows_per_pass"]
        needs, _ = gpu_plan.trainer_bytes(s, big["weights_mb"] * 2 ** 20, (big["layers"], big["hidden"]))
        assert needs >= run["peak_reserved_mb"] * 2 ** 20 + context, run
    one_b = next(m for m in results["models"] if m["model"] == "big")
    tokens = one_b["prompt_tokens"] + 160  # the synthetic rows: prompt, two 61-token answers and a 40-token gap
    s = settings(max_model_len=tokens)
    s.train.batch_size = 4
    needs, _ = gpu_plan.trainer_bytes(s, one_b["weights_mb"] * 2 ** 20, (16, 2048))
    assert needs >= max(r["peak_trainer_reserved_mb"] for r in one_b["rounds"]) * 2 ** 20 + context


def test_several_gpus_give_training_its_own_by_default():
    p = plan(gpus(4), settings(), MODEL_7B, trains=True)
    assert (p.serve_devices, p.train_device, p.shared, p.sleep, p.gpu_memory_utilization) == (["0"], "3", False, False, None)
    tp = plan(gpus(4), settings(tensor_parallel_size=2), MODEL_7B, trains=True)
    assert tp.serve_devices == ["0", "1"] and tp.train_device == "3"
    everything = plan(gpus(4), settings(tensor_parallel_size=4, devices=[0, 1, 2, 3]), MODEL_7B, trains=True)
    assert everything.train_device == "0" and everything.shared and everything.sleep
    s = settings(devices=[0, 1])
    s.train.devices = [2, 3]
    chosen = plan(gpus(4), s, MODEL_7B, trains=True)
    assert chosen.train_devices == ["2"] and any("train.devices 3 unused" in line for line in chosen.lines)


def test_each_training_process_gets_a_gpu_of_its_own_or_the_plan_refuses_naming_the_devices(tmp_path):
    s = settings()
    s.train.processes = 3
    p = plan(gpus(4), s, MODEL_7B, trains=True)  # vLLM on 0, the three ranks on the rest
    assert (p.serve_devices, p.train_devices, p.shared) == (["0"], ["1", "2", "3"], False)
    assert any("3 processes, one GPU each" in line for line in p.lines)
    with pytest.raises(AlightError, match=r"3 training processes need 3 GPUs, one each: this machine shows 2 "
                                          r"\(0..1\), vLLM takes 0 and 1 is free") as refused:
        plan(gpus(2), s, MODEL_7B, trains=True)
    assert "lower train.processes to 1" in refused.value.hint
    s.train.devices = [2, 3]
    with pytest.raises(AlightError, match=r"train.devices \[2, 3\] gives 2"):
        plan(gpus(4), s, MODEL_7B, trains=True)
    s.train.devices = [0, 1, 2]  # named explicitly: vLLM's GPU 0 shared (it sleeps while they train)
    shared = plan(gpus(4), s, MODEL_7B, trains=True)
    assert shared.train_devices == ["0", "1", "2"] and shared.shared and shared.sleep
    # accelerate's config decides the ranks on this machine (num_processes over num_machines)
    config = tmp_path / "accelerate.yaml"
    config.write_text("distributed_type: MULTI_GPU\nnum_machines: 2\nnum_processes: 4\n")
    s = settings()
    s.train.accelerate_config = str(config)
    assert plan(gpus(4), s, MODEL_7B, trains=True).train_devices == ["2", "3"]
    assert plan(gpus(4), s, MODEL_7B, trains=False).train_devices == []  # serving alone needs no trainer GPUs


def test_serving_alone_and_wrong_devices_and_no_gpu():
    alone = plan(gpus(1), settings(), MODEL_7B, trains=False)
    assert alone.train_device is None and not alone.shared and not alone.sleep
    with pytest.raises(AlightError, match=r"serve.devices \[5\]: this machine shows 4 GPU"):
        plan(gpus(4), settings(devices=[5]), MODEL_7B, trains=True)
    none = plan([], settings(), MODEL_7B, trains=True)
    assert none.serve_devices == [] and none.train_device is None and "CPU" in none.lines[0]


def test_the_gpus_nvidia_smi_lists_narrowed_by_cuda_visible_devices(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '0, GPU-aaa, 81559, NVIDIA H100, 550.54.15'\n"
                    "echo '1, GPU-bbb, 81559, NVIDIA H100, 550.54.15'\necho '2, GPU-ccc, 40960, NVIDIA A100, 550.54.15'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [(g.id, g.total_bytes // 1024 ** 2, g.name, g.driver) for g in visible_gpus()] == [
        ("0", 81559, "NVIDIA H100", "550.54.15"), ("1", 81559, "NVIDIA H100", "550.54.15"),
        ("2", 40960, "NVIDIA A100", "550.54.15")]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-aaa")
    assert [g.id for g in visible_gpus()] == ["2", "0"]


def test_the_plan_is_applied_before_vllm_starts(tmp_path, monkeypatch):
    from agentlightning_cli.serve.policy import PolicyServer
    from agentlightning_cli.serve.tiny_model import build_tiny_model
    from agentlightning_cli.serve.vllm import build_command, server_env

    tiny = build_tiny_model(tmp_path / "tiny")
    monkeypatch.setattr(gpu_plan, "visible_gpus", lambda: gpus(2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    policy = PolicyServer(small_settings(), tmp_path / "run", tiny, trains=True)

    def where_vllm_starts(*args, **kwargs):
        raise StopIteration

    monkeypatch.setattr(policy.vllm, "start", where_vllm_starts)
    with pytest.raises(StopIteration):
        policy.start()
    assert policy.vllm.cuda_devices == ["0"] and os.environ["CUDA_VISIBLE_DEVICES"] == "1"  # the trainer's GPU
    assert server_env({"CUDA_VISIBLE_DEVICES": "1"}, cuda_devices=["0"])["CUDA_VISIBLE_DEVICES"] == "0"
    assert policy.settings.serve.sleep_between_rounds == "off" and not policy.sleeps  # not shared: no sleep
    assert "--enable-sleep-mode" not in build_command("python", tiny, 8000, policy.settings.serve)


def test_several_training_processes_see_their_gpus_and_a_plan_short_of_gpus_stops_before_vllm(tmp_path, monkeypatch):
    from agentlightning_cli.serve.policy import PolicyServer
    from agentlightning_cli.serve.tiny_model import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny")
    started = []
    config = small_settings()
    config.train.processes = 2
    monkeypatch.setattr(gpu_plan, "visible_gpus", lambda: gpus(3))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    policy = PolicyServer(config, tmp_path / "run", tiny, trains=True)
    def vllm_starts(*args, **kwargs):
        started.append(1)
        raise StopIteration

    monkeypatch.setattr(policy.vllm, "start", vllm_starts)
    with pytest.raises(StopIteration):
        policy.start()
    assert policy.vllm.cuda_devices == ["0"] and os.environ["CUDA_VISIBLE_DEVICES"] == "1,2"  # one per rank
    monkeypatch.setattr(gpu_plan, "visible_gpus", lambda: gpus(2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    short = PolicyServer(small_settings(), tmp_path / "run2", tiny, trains=True)
    short.settings.train.processes = 2
    monkeypatch.setattr(short.vllm, "start", lambda *a, **k: started.append(2))
    with pytest.raises(AlightError, match="2 training processes need 2 GPUs"):
        short.start()
    assert started == [1] and os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"  # refused before vLLM or CUDA moved


def test_a_trainer_out_of_gpu_memory_ends_with_what_to_change(tmp_path, monkeypatch):
    import torch

    from agentlightning_cli.serve.tiny_model import build_tiny_model
    from agentlightning_cli.train import grpo
    from agentlightning_cli.train.round_step import train_round

    def out_of_memory(job):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(grpo, "train", out_of_memory)
    store, run = new_run(tmp_path)
    record_round(store, run.id, 0)
    with pytest.raises(AlightError) as err:
        train_round(store, run.id, 0, base_model=build_tiny_model(tmp_path / "tiny"), settings=small_settings(),
                    out_dir=tmp_path / "out")
    store.close()
    assert "ran out of GPU memory" in err.value.message and "batch 4" in err.value.message
    assert "train.batch_size (now 4)" in err.value.hint and "Rerun the same command to resume" in err.value.hint
