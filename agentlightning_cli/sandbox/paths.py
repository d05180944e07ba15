"""Which host folders a sandboxed command needs to see read-only, found from what it runs.

A harness needs its install folder and the interpreters that folder points at: a virtualenv's base Python
(often a pyenv version under the user's HOME, which is otherwise hidden), Node for an npm install. An external
recipe (nothing installed) needs only what its command runs: the program file itself, the interpreter its `#!`
line names with that interpreter's prefix or virtualenv, and any other file the command names by its full path
(never the folder they sit in: it may hold the task set, the run directory, other agents' files). Setup and
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
    if (install_dir / "venv" / "pyvenv.cfg").is_file():
        roots += _venv_base(install_dir / "venv")
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


def image_interpreters(install_dir: Path) -> list[Path]:
    """What a harness install runs on that lies in the system folders, which a container takes from its image, not
    the host: Node for an npm install (its launcher's `#!/usr/bin/env node`), mounted as the single file where
    the host has it so the image's own `env` finds it. A Python install's interpreter lies outside the system
    folders (runtime_roots mounts it); a system Python's standard library would not follow a single file, so
    such an install is left to the check in the image, which names it."""
    install_dir = Path(install_dir)
    if not (install_dir / "node_modules").is_dir():
        return []
    node = shutil.which("node")
    return [Path(node)] if node else []


def program_roots(argv: list[str], path: str | None, private: list[Path] = ()) -> list[Path]:
    """What an external recipe's command line needs to see: argv[0] (as found on `path` when it is a bare name),
    its interpreter chain, and every other argument that is the full path of an existing file, each file alone.
    Files inside `private` (the episode's own writable folders: workspace, episode folder) need no mount."""
    private = [Path(os.path.realpath(p)) for p in private]
    roots: list[Path] = []
    program = argv[0] if os.path.isabs(argv[0]) or "/" in argv[0] else shutil.which(argv[0], path=path)
    if program:
        roots += interpreter_roots(Path(os.path.abspath(program)), path)
    for arg in argv[1:]:
        if os.path.isabs(arg) and os.path.isfile(arg):
            roots.append(Path(arg))
    kept = [r for r in roots if not any(Path(os.path.realpath(r)).is_relative_to(p) for p in private)]
    return _outside_system(kept)


def interpreter_roots(program: Path, path: str | None, depth: int = 0) -> list[Path]:
    """A program and what runs it: a script's `#!` interpreter (through `env`, found on `path`) and so on, a
    virtualenv's folder and its base Python's prefix, an interpreter's prefix (/x/versions/3.12.1)."""
    if not program.exists():
        return []
    real = Path(os.path.realpath(program))
    venv = program.parent.parent
    if program.parent.name == "bin" and (venv / "pyvenv.cfg").is_file():  # a virtualenv's interpreter or script
        roots = [venv, *_venv_base(venv)]
    elif _is_interpreter(real):
        roots = [program, _prefix(real)]
    else:
        roots = [program]
    if real != program:
        roots.append(real)
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    if program.is_relative_to(pyenv / "shims"):
        roots.append(pyenv)  # a shim runs pyenv itself, which picks a version from pyenv's own folders
    shebang = _shebang(real, path) if depth < 3 else None
    if shebang:
        roots += interpreter_roots(shebang, path, depth + 1)
    return roots


def _is_interpreter(real: Path) -> bool:
    return real.name.startswith(("python", "node", "pypy", "ruby", "perl", "bun", "deno"))


def _venv_base(venv: Path) -> list[Path]:
    """The prefix of the Python a virtualenv was made from (pyvenv.cfg's `home`), often pyenv's under HOME."""
    for line in (venv / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return [_prefix(Path(os.path.realpath(value.strip())) / "python")]
    return []


def _shebang(program: Path, path: str | None) -> Path | None:
    """The interpreter a script's first line names (`#!/usr/bin/env -S python3 -u` -> python3 on PATH)."""
    try:
        with open(program, "rb") as fh:
            first = fh.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        found = shutil.which(names[0], path=path) if names else None
        return Path(found) if found else None
    return Path(words[0])


def task_shell_roots(with_alight: bool = False) -> list[Path]:
    """For setup and reward commands: alight's interpreter, and pyenv's versions when present; with_alight: alight's
    package too (the SWE-bench reward command runs it; from a source checkout it lies outside the virtualenv)."""
    roots = [Path(sys.prefix), Path(os.path.realpath(sys.base_prefix)), *([PACKAGE_DIR] if with_alight else [])]
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
