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


# --- one tiny-model vLLM for the modules that only talk to a running server (tests/vllm_support.py) ---

@pytest.fixture
def shared_tiny_vllm(tmp_path_factory):
    from tests.vllm_support import SHARED

    return SHARED.get(tmp_path_factory)


_SHARED_VLLM_MODULES: set = set()


def _uses_shared_vllm(item: pytest.Item | None) -> bool:
    from tests.vllm_support import FIXTURE

    return item is not None and FIXTURE in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the whole modules that use the shared server to where the first of them is, in their own order, so the
    server runs once, for as long as they need it. Order inside a module is kept (some tests must go last)."""
    modules = {item.module for item in items if _uses_shared_vllm(item)}
    _SHARED_VLLM_MODULES.clear()
    _SHARED_VLLM_MODULES.update(modules)
    if len(modules) < 2:
        return
    users = [item for item in items if item.module in modules]
    first = next(i for i, item in enumerate(items) if item.module in modules)
    rest = [item for item in items if item.module not in modules]
    items[:] = rest[:first] + users + rest[first:]


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    # After the last test of the modules that use it (their other tests run while it is up: no restart between).
    if item.module in _SHARED_VLLM_MODULES and (nextitem is None or nextitem.module not in _SHARED_VLLM_MODULES):
        from tests.vllm_support import SHARED

        SHARED.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from tests.vllm_support import SHARED

    SHARED.stop()  # an interrupted session still leaves no server behind
