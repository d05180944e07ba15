"""A run's settings snapshot (runs.config): written once when the run is created, read by train, inspect, resume.

One shape: {"command": "run" | "serve" | ..., "settings": Settings.model_dump(mode="json"), ...what the command
adds ("harness", "task_set", "options")}. `settings.serve.model` is the model directory vLLM actually served
(`--model`, a Hub download, or the embedded tiny model), resolved to an absolute path, so a later `alight train
RUN` trains the weights the episodes were sampled from; `settings.serve.max_model_len` is the context vLLM was
started with (raised for the recipe), which is the row limit the run's rows were meant for.

Stores written before this shape was settled hold `alight serve`'s settings flat at the top level; `settings_of`
reads both. Pure: no pydantic, no torch (inspect reads this while painting its first screen).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def snapshot_settings(settings: Any, model: Path | str | None) -> dict[str, Any]:
    """settings.model_dump(mode="json") with serve.model set to the model directory that was served."""
    dumped = settings.model_dump(mode="json")
    if model is not None:
        dumped["serve"]["model"] = str(Path(model).expanduser().resolve())
    return dumped


def settings_of(config: dict[str, Any] | None) -> dict[str, Any]:
    """The settings layer of a run's snapshot, either shape; {} when nothing was recorded."""
    config = config or {}
    nested = config.get("settings")
    if isinstance(nested, dict) and nested:
        return nested
    return config if any(k in config for k in ("serve", "train", "reward", "home")) else {}


def served_model(config: dict[str, Any] | None) -> str | None:
    """serve.model of the snapshot: the directory vLLM served; None when the run recorded none."""
    return (settings_of(config).get("serve") or {}).get("model") or None


def recorded_home(config: dict[str, Any] | None) -> str | None:
    return settings_of(config).get("home") or None


def row_limit(config: dict[str, Any] | None) -> tuple[int | None, str]:
    """(limit, where from): the run's train.max_row_tokens, else the serve.max_model_len it served with."""
    layer = settings_of(config)
    train, serve = layer.get("train") or {}, layer.get("serve") or {}
    if train.get("max_row_tokens"):
        return int(train["max_row_tokens"]), "the run's train.max_row_tokens"
    if serve.get("max_model_len"):
        return int(serve["max_model_len"]), "the run's serve.max_model_len"
    return None, "not recorded"
