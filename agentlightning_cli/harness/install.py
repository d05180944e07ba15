"""Install a harness into its own folder under ALIGHT_HOME/harnesses/<name>-<version>/, once.

A recipe without `install` is external: nothing is installed, and its program is found per episode
(env.resolve_program).

A venv recipe gets `<dir>/venv` built with a Python that meets the recipe's requirement; an npm recipe gets
`npm install --prefix <dir>`. Each step is one line on stderr; pip's or npm's own output goes to
`<dir>/install.log`, and its last lines are shown when a step fails. The marker file is written last, so an
interrupted install is redone from scratch next time, and a file lock keeps concurrent installs (parallel tests,
two shells) from colliding.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from agentlightning_cli.errors import AlightError
from agentlightning_cli.harness.env import harness_env, resolve_program
from agentlightning_cli.harness.recipe import Recipe, dummy_context

MARKER = ".alight-install.json"
INSTALL_LOG = "install.log"  # the installer's own output, kept beside what it installed


@dataclass
class Installed:
    """Where an installed harness lives and what it runs."""

    dir: Path
    bin_dir: Path
    executable: Path
    version: str
    external: bool = False
    """An external recipe: nothing installed; `executable` is the program as found now (or as written)."""


EXTERNAL = "external"


def harnesses_home(home: Path) -> Path:
    return Path(home).expanduser() / "harnesses"


def pinned_version(recipe: Recipe, version_override: str | None = None) -> str:
    return EXTERNAL if recipe.install is None else version_override or recipe.install.version


def external_layout(recipe: Recipe) -> Installed:
    program = recipe.command[0]
    found = resolve_program(program, recipe.recipe_dir)  # a workspace-relative program is found per episode
    executable = Path(found) if found else Path(program)
    return Installed(recipe.recipe_dir, executable.parent if found else recipe.recipe_dir, executable, EXTERNAL,
                     external=True)


def install_dir(recipe: Recipe, home: Path, version_override: str | None = None) -> Path:
    owner = (recipe.install.shared_with if recipe.install else None) or recipe.name
    return harnesses_home(home) / f"{owner}-{pinned_version(recipe, version_override)}"


def layout(recipe: Recipe, home: Path, version_override: str | None = None) -> Installed:
    if recipe.install is None:
        return external_layout(recipe)
    base = install_dir(recipe, home, version_override)
    bin_dir = base / "venv" / "bin" if recipe.install.kind == "venv" else base / "node_modules" / ".bin"
    return Installed(base, bin_dir, bin_dir / recipe.install.bin, pinned_version(recipe, version_override))


def is_installed(recipe: Recipe, home: Path, version_override: str | None = None) -> bool:
    if recipe.install is None:
        return True  # nothing to install
    found = layout(recipe, home, version_override)
    marker = found.dir / MARKER
    if not marker.is_file() or not found.executable.exists():
        return False
    try:
        return json.loads(marker.read_text()).get("version") == found.version
    except ValueError:
        return False


def require_installed(recipe: Recipe, home: Path, version_override: str | None = None) -> Installed:
    if not is_installed(recipe, home, version_override):
        raise AlightError(
            f"harness '{recipe.name}' {pinned_version(recipe, version_override)} is not installed under {harnesses_home(home)}",
            f"run `alight harness install {recipe.name}`",
        )
    return layout(recipe, home, version_override)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def satisfies(version: str, requirement: str | None) -> bool:
    """Whether `version` meets a PEP 440 requirement such as ">=3.10", "==3.12.*" or ">=3.11,<3.14".

    Upper bounds matter: a package that says `==3.12.*` has no distribution for 3.13, so pip would fail.
    """
    if not requirement:
        return True
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        spec = SpecifierSet(requirement)
    except InvalidSpecifier as exc:
        raise AlightError(f"unsupported version requirement {requirement!r}",
                          "write it the way the package declares it, e.g. '>=3.10' or '==3.12.*'") from exc
    return spec.contains(".".join(str(p) for p in _version_tuple(version)), prereleases=True)


def _python_version(python: str) -> str | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_python(requirement: str | None, configured: str | None = None) -> str | None:
    """The configured interpreter, else the running one, else python3.N on PATH, else pyenv's versions."""
    if configured:
        found = _python_version(configured)
        return configured if found and satisfies(found, requirement) else None
    if satisfies("%d.%d.%d" % sys.version_info[:3], requirement):
        return sys.executable
    candidates = [shutil.which(f"python3.{minor}") for minor in range(20, 9, -1)]
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += [str(p) for p in sorted(root.glob("3.*/bin/python3"), key=lambda p: _version_tuple(p.parent.parent.name), reverse=True)]
    for candidate in candidates:
        if candidate and (found := _python_version(candidate)) and satisfies(found, requirement):
            return candidate
    return None


def _check_prerequisites(recipe: Recipe, python_override: str | None) -> str | None:
    spec = recipe.install
    python = None
    if spec.kind == "venv":
        python = find_python(spec.python, python_override)
        if python is None:
            where = f"{python_override} does not satisfy it" if python_override else "none found on PATH or under pyenv"
            raise AlightError(
                f"{recipe.name} needs Python {spec.python}; {where}",
                f"install a Python that satisfies {spec.python} (e.g. with pyenv) or set harness.{recipe.name}.python",
            )
    else:
        npm, node = shutil.which("npm"), shutil.which("node")
        if not npm or not node:
            raise AlightError(f"{recipe.name} is an npm package; node and npm are needed", "install Node.js >= 20")
        node_version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
        if not satisfies(node_version, spec.node):
            raise AlightError(f"{recipe.name} needs Node {spec.node}; found {node_version}", "install a newer Node.js")
    for program in spec.prerequisites:
        if shutil.which(program) is None:
            raise AlightError(f"{recipe.name} needs `{program}` on PATH at run time", f"install {program} (e.g. apt-get install {program})")
    return python


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


TAIL_LINES = 15


def _run(cmd: list[str], log, output: Path) -> None:
    """One progress line per step; the installer's own output (pip's ~100 lines of Collecting/Downloading, npm's)
    goes to `output`, and only its last lines are shown, when the step fails."""
    line = " ".join(cmd)
    log(f"$ {line}")
    with open(output, "a") as sink:
        sink.write(f"$ {line}\n")
        sink.flush()
        proc = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = output.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        log(f"the last lines of {output}:")
        for text in tail:
            log(f"  | {text}")
        raise AlightError(f"install step failed (exit {proc.returncode}): {line}",
                          f"its whole output is in {output}; fix what it says, then install again")


def check_argv(recipe: Recipe, found: Installed) -> list[str]:
    """The recipe's check command line (empty when it has none), rendered for this install."""
    ctx = {**dummy_context(), "install_dir": str(found.dir), "bin_dir": str(found.bin_dir), "executable": str(found.executable)}
    return [recipe.render(part, ctx) for part in recipe.check or []]


def verify(recipe: Recipe, found: Installed, log=lambda line: None) -> str:
    """Run the recipe's check command (e.g. `--version`); returns its first output line."""
    if not recipe.check:
        log("check: none (the recipe has no check command)")
        return ""
    argv = check_argv(recipe, found)
    env = harness_env()
    with tempfile.TemporaryDirectory(prefix="alight-check-") as home:
        env["HOME"] = home  # the check must not write into the user's real home (first-run files)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=home, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AlightError(f"{recipe.name}: check command {argv} failed: {exc}") from exc
    if proc.returncode != 0:
        raise AlightError(f"{recipe.name}: check command {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    lines = [ln for ln in (proc.stdout or proc.stderr).splitlines() if ln.strip()]
    log(f"check: {lines[0] if lines else '(no output)'}")
    return lines[0] if lines else ""


def install(recipe: Recipe, home: Path, *, python: str | None = None, version: str | None = None,
            force: bool = False, log=lambda line: print(line, file=sys.stderr)) -> Installed:
    """Install once; returns at once when the marker says this version is already there."""
    found = layout(recipe, home, version)
    if recipe.install is None:
        log(f"nothing to install: {recipe.name} is external (it runs {recipe.command[0]!r} as it is)")
        return found
    with _locked(found.dir.with_name(found.dir.name + ".lock")):
        if is_installed(recipe, home, version) and not force:
            log(f"{recipe.name} {found.version} already installed in {found.dir}")
            return found
        interpreter = _check_prerequisites(recipe, python)
        if found.dir.exists():
            shutil.rmtree(found.dir)
        found.dir.mkdir(parents=True)
        started = time.monotonic()
        spec = recipe.install
        output = found.dir / INSTALL_LOG
        if spec.kind == "venv":
            log(f"installing {spec.package}=={found.version} into a venv ({interpreter}); pip's output: {output}")
            _run([interpreter, "-m", "venv", str(found.dir / "venv")], log, output)
            pip = [str(found.dir / "venv" / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
            _run(pip + [f"{spec.package}=={found.version}"], log, output)
        else:
            log(f"installing {spec.package}@{found.version} with npm; npm's output: {output}")
            _run(["npm", "install", "--prefix", str(found.dir), "--no-audit", "--no-fund", "--no-save",
                  f"{spec.package}@{found.version}"], log, output)
        if not found.executable.exists():
            raise AlightError(f"install finished but {found.executable} is missing", "the package layout changed; check the recipe's install.bin")
        verify(recipe, found, log)
        marker = {"name": recipe.name, "package": spec.package, "version": found.version, "kind": spec.kind,
                  "python": interpreter, "installed_at": time.time(), "seconds": round(time.monotonic() - started, 1)}
        (found.dir / MARKER).write_text(json.dumps(marker, indent=2))
        log(f"installed {recipe.name} {found.version} in {marker['seconds']} s")
        return found
