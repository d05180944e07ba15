"""`--adapter DIR` (serve.adapter): a trained LoRA adapter served as round 0's policy, checked first.

An adapter only means something on the base model it was trained on: its `adapter_config.json` names that model
(`base_model_name_or_path`, the absolute path `alight train` was given). It is compared with the model to be
served before anything starts. Paths differ between machines and ALIGHT_HOMEs for the same model, so the
comparison is by identity: the same resolved folder; else the same name — a built-in's folder name carries its
build (`tiny-2`, `smollm2-135m-instruct-1`), a Hub cache folder (`models--ORG--NAME/snapshots/REV`) or a Hub id
gives `ORG/NAME` — and, where both folders are readable here, the same config.json. So SmolLM2 from the Hub and
alight's dequantized `smollm2` build are different bases (their weights differ), as they should be.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Iterator

from agentlightning_cli.errors import AlightError

HUB_CACHE = re.compile(r"models--([^/]+)--([^/]+)/snapshots/[^/]+/?$")
HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
SHAPE_KEYS = ("architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
              "intermediate_size")
"""config.json fields that tell two models apart (a copy of the same folder keeps them all)."""


def check_files(adapter: Path) -> Path:
    path = Path(adapter).expanduser()
    if not (path / "adapter_config.json").is_file() or not (path / "adapter_model.safetensors").is_file():
        raise AlightError(f"--adapter {adapter}: no adapter_config.json + adapter_model.safetensors there",
                          hint="give a directory `alight train` wrote (runs/NAME/adapters/round-N)")
    return path.resolve()


def base_model_of(adapter: Path) -> str | None:
    config = json.loads((Path(adapter) / "adapter_config.json").read_text(encoding="utf-8"))
    return config.get("base_model_name_or_path") or None


def model_identity(name_or_path: str | Path) -> str:
    """What names a model wherever it lies: `ORG/NAME` for a Hub id or Hub cache folder, else the folder's name."""
    text = str(name_or_path).rstrip("/")
    found = HUB_CACHE.search(text)
    if found:
        return f"{found.group(1)}/{found.group(2)}".lower()
    if HUB_ID.fullmatch(text) and not Path(text).exists():
        return text.lower()
    return Path(text).name.lower()


def _shape(folder: str | Path) -> dict | None:
    config = Path(folder) / "config.json"
    if not config.is_file():
        return None
    data = json.loads(config.read_text(encoding="utf-8"))
    return {k: data.get(k) for k in SHAPE_KEYS}


def check_adapter_base(adapter: Path, served: str | Path, model_flag: str = "--model") -> Path:
    """AlightError unless the adapter at `adapter` was made for `served` (a model folder, or the name an
    --upstream server serves); returns the adapter's resolved folder. An adapter that names no base passes."""
    path = check_files(adapter)
    base = base_model_of(path)
    if base is None:
        return path
    same_folder = Path(base).exists() and Path(str(served)).exists() and Path(base).resolve() == Path(served).resolve()
    if same_folder:
        return path
    shapes = (_shape(base), _shape(served))
    if model_identity(base) == model_identity(served) and (None in shapes or shapes[0] == shapes[1]):
        return path
    raise AlightError(
        f"--adapter {adapter} was trained on {base} ({model_identity(base)}), not on the model served here, "
        f"{served} ({model_identity(served)})",
        hint=f"serve the adapter's base ({model_flag} {base}), or give an adapter trained on "
             f"{model_identity(served)} (runs/NAME/adapters/round-N of a run on that model)")


def upstream_name(adapter: Path) -> str:
    """The name an adapter is loaded under on servers alight did not start: one per adapter folder."""
    digest = hashlib.blake2b(str(Path(adapter).resolve()).encode(), digest_size=4).hexdigest()
    return f"alight-adapter-{digest}"


def upstream_policy(adapter: Path | None, urls: list[str], served: str, api_key: str | None = None) -> Any:
    """The name requests go to on --upstream servers for a run: their own model, or `adapter` loaded there."""
    if adapter is None:
        return contextlib.nullcontext(served)
    return loaded_on(urls, Path(adapter), api_key=api_key)


@contextlib.contextmanager
def loaded_on(urls: list[str], adapter: Path, api_key: str | None = None) -> Iterator[str]:
    """The adapter loaded on every --upstream server (vLLM with runtime LoRA updating) for the run, then unloaded
    where this run loaded it; yields the name requests go to. One already loaded under that name is reused."""
    from agentlightning_cli.serve.adapters import AdapterClient

    name, mine = upstream_name(adapter), []
    try:
        for url in urls:
            client = AdapterClient(url, api_key=api_key)
            if name in client.loaded():
                continue
            try:
                client.load(name, adapter)
            except AlightError as exc:
                raise AlightError(f"{url}: {exc.message}",
                                  "a server alight did not start needs --enable-lora, a --max-lora-rank of at least "
                                  "the adapter's rank and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 to serve --adapter; "
                                  "the adapter folder must be at the same path there") from exc
            mine.append(client)
        yield name
    finally:
        for client in mine:
            with contextlib.suppress(AlightError, OSError):
                client.unload(name)
