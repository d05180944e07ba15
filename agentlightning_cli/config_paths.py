"""Where the settings files live. Apart from `config` so that start-up (the log level lookup runs on every
command) can ask whether one exists without importing pydantic and yaml."""

from __future__ import annotations

import os
from pathlib import Path


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "alight" / "config.yaml"


def project_config_path() -> Path:
    return Path.cwd() / "alight.yaml"
