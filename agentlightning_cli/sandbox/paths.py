"""Which host folders a sandboxed command needs to see read-only, found from what it runs.

A harness needs its install folder and the interpreters that folder points at: a virtualenv's base Python
(often a pyenv version under the user's HOME, which is otherwise hidden), Node for an npm install. Setup and
reward commands need the interpreters a task's commands usually call (alight's own, for SWE-bench scoring).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from agentlightning_cli.sandbox.bwrap import SYSTEM_DIRS

PACKAGE_DIR = Path(__file__).resolve().parent.parent
"""alight's own package: the SWE-bench reward command runs `python -m agentlightning_cli.tasks.swebench_tests`."""


def runtime_roots(install_dir: Path) -> list[Path]:
    """The install folder plus the prefixes of the interpreters it links to (outside the system folders)."""
    install_dir = Path(install_dir)
    roots = [install_dir, Path(os.path.realpath(install_dir))]
    cfg = install_dir / "venv" / "pyvenv.cfg"
    if cfg.is_file():
        for line in cfg.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                roots.append(_prefix(Path(os.path.realpath(value.strip())) / "python"))
    for bin_dir in (install_dir / "venv" / "bin", install_dir / "node_modules" / ".bin"):
        if not bin_dir.is_dir():
            continue
        for entry in bin_dir.iterdir():
            if entry.is_symlink():
                target = Path(os.path.realpath(entry))
                if not target.is_relative_to(os.path.realpath(install_dir)):
                    roots.append(_prefix(target))
    if (install_dir / "node_modules").is_dir():
        node = shutil.which("node")
        if node:
            roots.append(_prefix(Path(os.path.realpath(node))))
    return _outside_system(roots)


def task_shell_roots() -> list[Path]:
    """For setup and reward commands: alight's interpreter and package, and pyenv's versions when present."""
    roots = [Path(sys.prefix), Path(os.path.realpath(sys.base_prefix)), PACKAGE_DIR]
    exe = Path(os.path.realpath(sys.executable))
    roots.append(_prefix(exe))
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    if pyenv.is_dir():
        roots.append(pyenv)  # interpreters and shims only: no secrets live there
    return _outside_system(roots)


def _prefix(executable: Path) -> Path:
    """/x/versions/3.12.1/bin/python3.12 -> /x/versions/3.12.1 (the folder holding bin/ and lib/)."""
    parent = executable.parent
    return parent.parent if parent.name == "bin" else parent


def _outside_system(paths: list[Path]) -> list[Path]:
    system = [Path(d) for d in SYSTEM_DIRS]
    out: list[Path] = []
    for path in paths:
        if path in out or str(path) == "/" or any(path == s or path.is_relative_to(s) for s in system):
            continue
        out.append(path)
    return out
