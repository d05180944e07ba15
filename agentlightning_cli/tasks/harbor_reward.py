"""A Harbor verifier's verdict, read the way harbor/verifier/verifier.py reads it: /logs/verifier/reward.json
({"name": number, ...}) when it exists, else reward.txt (one number); an empty file, a value that is not a finite
number, or no file at all is an error (a `reward_error` episode with the verifier's log), never a zero.

alight adds two rules Harbor leaves to its container setup: the verifier folder is made empty just before test.sh
runs, outside anything the agent could reach (`fresh_verifier_dir`), and a reward file found there before test.sh
ran is an error too (the agent must not grade itself). Which key of reward.json is *the* reward is a setting
(default `reward`, Harbor's own 1-D convention); every key is kept in the reward detail."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REWARD_TXT = "reward.txt"
REWARD_JSON = "reward.json"
TEST_LOG = "test-stdout.txt"
"""Harbor redirects test.sh's stdout and stderr here (build_execution_command)."""
LOG_TAIL_BYTES = 4000


class RewardFileError(Exception):
    """The verifier gave no usable reward; `str()` says why and where, `log` is the end of its output."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class Verdict:
    reward: float
    detail: dict[str, Any]
    """{"source": "reward.json" | "reward.txt", "rewards": {name: value}, "key": the key used}."""


def fresh_verifier_dir(path: Path) -> Path:
    """The host folder bound at /logs/verifier for test.sh: created now, empty. One that exists already means
    something wrote there before the verifier ran (the agent, a leftover): refused, never reused."""
    if path.exists() and any(path.iterdir()):
        found = ", ".join(sorted(p.name for p in path.iterdir()))
        raise RewardFileError(f"the verifier folder {path} was not empty before test.sh ran ({found}): a reward "
                              "written before verification is not a verdict")
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_verdict(verifier_dir: Path, key: str = "reward") -> Verdict:
    """The reward test.sh wrote into `verifier_dir` (the host side of /logs/verifier)."""
    log = _tail(verifier_dir / TEST_LOG)
    json_path, txt_path = verifier_dir / REWARD_JSON, verifier_dir / REWARD_TXT
    if json_path.exists():
        rewards = _read_json(json_path, log)
        if key not in rewards:
            raise RewardFileError(f"{json_path} has no key {key!r} (it has {', '.join(sorted(rewards)) or 'none'}); "
                                  "set harbor.reward_key to the key that is the reward", log)
        return Verdict(float(rewards[key]), {"source": REWARD_JSON, "rewards": rewards, "key": key})
    if txt_path.exists():
        value = _read_txt(txt_path, log)
        return Verdict(value, {"source": REWARD_TXT, "rewards": {"reward": value}, "key": "reward"})
    raise RewardFileError(f"test.sh wrote no reward: neither {txt_path} nor {json_path} exists", log)


def _read_txt(path: Path, log: str) -> float:
    text = path.read_bytes()
    if not text:
        raise RewardFileError(f"reward file is empty: {path}", log)
    try:
        value = float(text.decode("utf-8", "replace"))
    except ValueError:
        raise RewardFileError(f"reward file is not a number: {path} holds {text[:80]!r}", log) from None
    if not math.isfinite(value):
        raise RewardFileError(f"reward is not finite: {path} holds {value!r}", log)
    return value


def _read_json(path: Path, log: str) -> dict[str, float]:
    if path.stat().st_size == 0:
        raise RewardFileError(f"reward file is empty: {path}", log)
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError as exc:
        raise RewardFileError(f"reward file is not JSON: {path} ({exc})", log) from None
    if not isinstance(data, dict):
        raise RewardFileError(f"reward file {path} is not a JSON object of named numbers", log)
    for name, value in data.items():
        # Harbor's rule: real numbers only (json reads NaN, Infinity and 1e309 as non-finite floats).
        if not isinstance(value, (int, float)):  # as Harbor: a bool is an int (1 or 0)
            raise RewardFileError(f"reward {name!r} in {path} is not a number: {value!r}", log)
        if not math.isfinite(value):
            raise RewardFileError(f"reward {name!r} in {path} is not finite: {value!r}", log)
    return data


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
