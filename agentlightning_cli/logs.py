"""alight's logging: one stderr handler on the `alight` logger tree, set once by the CLI.

The level comes from `--log-level`, else `-v` (info), else ALIGHT_LOG_LEVEL, else `log_level` in alight.yaml or
the user config, else warning: by default only warnings (e.g. a literal secret in a recipe) are shown; `-v`
adds progress (vLLM start, proxy listening, episodes, installs); debug adds per-request detail.

Modules log with `logging.getLogger("alight.<room>")`. Imports nothing of alight at module level (bottom layer).
"""

from __future__ import annotations

import logging
import os
import sys

LEVELS = ("debug", "info", "warning", "error")
DEFAULT = "warning"
ENV_VAR = "ALIGHT_LOG_LEVEL"


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"alight: {record.levelname.lower()}: {record.getMessage()}"


def resolve_level(flag: str | None = None, verbose: bool = False, environ: dict[str, str] | None = None) -> str:
    """The level to use; an unknown name is an error naming the choices."""
    from agentlightning_cli.errors import AlightError

    environ = os.environ if environ is None else environ
    level = flag or ("info" if verbose else None) or environ.get(ENV_VAR) or _from_config_files() or DEFAULT
    level = level.strip().lower()
    if level not in LEVELS:
        source = "--log-level" if flag else ENV_VAR if environ.get(ENV_VAR) else "log_level"
        raise AlightError(f"{source}: unknown log level {level!r}", f"use one of {', '.join(LEVELS)}")
    return level


def _from_config_files() -> str | None:
    """`log_level` from alight.yaml / the user config, read only when one exists (keeps start-up cheap)."""
    from agentlightning_cli.config_paths import project_config_path, user_config_path

    if not (project_config_path().is_file() or user_config_path().is_file()):
        return None
    from agentlightning_cli.config import load_settings
    from agentlightning_cli.errors import AlightError

    try:
        return load_settings().log_level
    except AlightError:
        return None  # the command itself reports a broken config file


def configure(level: str = DEFAULT) -> None:
    """Idempotent: one handler, the given level."""
    logger = logging.getLogger("alight")
    logger.setLevel(level.upper())
    logger.propagate = False
    if not any(getattr(h, "_alight", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_Formatter())
        handler._alight = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
