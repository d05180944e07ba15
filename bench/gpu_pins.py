"""Does the GPU install resolve? pip's own resolver, against the package registry, in a dry run: the `train` and
`vllm` extras' pins (what `bash scripts/install.sh --gpu` installs) with nothing installed assumed. Prints the
versions it chose for torch and vLLM and writes bench/results/gpu_pins.json. Reaches the registry: a bench, not a
test (tests/test_install_pins.py checks the pins agree offline).

    python bench/gpu_pins.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "gpu_pins.json"
WATCH = ("torch", "vllm", "transformers", "trl", "peft", "triton", "flashinfer-python", "xformers")


def main() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    wanted = extras["train"] + extras["vllm"]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                               "--report", str(report), *wanted], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"pip could not resolve {wanted}:\n{done.stderr[-3000:]}")
        data = json.loads(report.read_text())
    chosen = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in data["install"]}
    vllm_requires = next(i["metadata"].get("requires_dist", []) for i in data["install"]
                         if i["metadata"]["name"].lower() == "vllm")
    result = {"requested": wanted, "resolved": {k: chosen.get(k) for k in WATCH if k in chosen},
              "packages": len(chosen), "vllm_requires_torch": [r for r in vllm_requires if r.startswith("torch")],
              "note": "a local version label on torch (+cpu) comes from a local wheel folder in pip's configuration; "
                      "without one pip takes PyPI's Linux wheel of the same version, a CUDA build"}
    print(f"{'package':20} version")
    for name, version in result["resolved"].items():
        print(f"{name:20} {version}")
    print(f"vLLM requires: {', '.join(result['vllm_requires_torch'])}; {result['packages']} packages in all")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
