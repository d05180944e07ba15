"""Shared fixtures: every test runs with its own ALIGHT_HOME, cwd-free config and no provider keys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Variables a developer's shell may carry that would point clients away from loopback or change settings.
_SCRUB_PREFIXES = ("ALIGHT_", "OPENAI_", "ANTHROPIC_", "LLM_", "MSWEA_", "CODEX_", "HOSTED_VLLM_")
_SCRUB_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(_SCRUB_PREFIXES) or name in _SCRUB_NAMES:
            monkeypatch.delenv(name, raising=False)
    home = tmp_path / "alight-home"
    monkeypatch.setenv("ALIGHT_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return home
