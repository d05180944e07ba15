"""Built-in models are built once into ALIGHT_HOME/models/<name>/: in a temp folder beside it, renamed at the
end, so a crash or Ctrl-C never leaves a half-written model that a later run would serve."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable


def build_once(final: Path, build: Callable[[Path], Any]) -> Path:
    """`final` when it holds a model already; otherwise build(tmp) and rename tmp to final."""
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process won the race and renamed its build first; theirs is as good as ours.
            if not (final / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
