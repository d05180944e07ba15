"""The container image the `sandbox: container` tests run in, built here once per machine (no registry is
reachable): a Debian bookworm root file system from Debian's packages (`debootstrap --variant=minbase`, with
python3 and git, as project images have), marked with /etc/alight-test-image, imported with `podman import`.
The root file system is cached as a tarball next to the test harness installs, so a later session only imports it.
An older suite (bullseye, glibc 2.31) is built the same way on demand: the image whose C library cannot run this
machine's Python."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from tests.harness_support import harness_home

IMAGE = "localhost/alight-test:bookworm-pytest"
OLD_IMAGE = "localhost/alight-test:bullseye"
MARK = "alight test image\n"
MIRROR = "http://deb.debian.org/debian"
SUITES = {IMAGE: ("bookworm", ["python3", "python3-pytest", "git", "patch"]), OLD_IMAGE: ("bullseye", [])}


RUNTIMES = ("podman", "docker")
"""The runtimes the container tests run on; .ci/run installs both and starts docker's daemon."""


def podman() -> str:
    return runtime("podman")


def runtime(name: str = "podman") -> str:
    """The runtime's executable; for docker, one whose daemon answers. Fails (never skips) when it is missing."""
    found = shutil.which(name)
    assert found, f"{name} is not installed: `apt-get install podman runc docker.io debootstrap` (.ci/run does it)"
    if name == "docker":
        info = subprocess.run([found, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
        assert info.returncode == 0, f"docker's daemon does not answer (.ci/run starts dockerd): {info.stderr[-500:]}"
    return found


def _exists(exe: str, name: str) -> bool:
    return subprocess.run([exe, "image", "inspect", name], capture_output=True).returncode == 0


def image(name: str = IMAGE, runtime_name: str = "podman") -> str:
    """`name`, present in the runtime's local store (built, or imported from the cached tarball)."""
    exe = runtime(runtime_name)
    if _exists(exe, name):
        return name
    cache = harness_home() / "images"
    cache.mkdir(parents=True, exist_ok=True)
    suite, include = SUITES[name]
    tarball = cache / f"{suite}-minbase{''.join('-' + p for p in include)}.tar"
    with open(cache / f"{suite}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tarball.exists():
            _build(suite, include, tarball)
        if not _exists(exe, name):
            with open(tarball, "rb") as f:
                subprocess.run([exe, "import", "-", name], stdin=f, check=True, capture_output=True)
    return name


def image_with_project(name: str, project: Path, base: str = IMAGE, workdir: str = "/testbed",
                       runtime_name: str = "podman") -> str:
    """`base` with the folder `project` copied to `workdir`: a SWE-bench-style instance image, made here."""
    exe = runtime(runtime_name)
    if _exists(exe, name):
        subprocess.run([exe, "rmi", "-f", name], capture_output=True)
    from agentlightning_cli.sandbox.container import ulimit_args

    box = f"alight-build-{Path(project).name}"
    subprocess.run([exe, "rm", "-f", box], capture_output=True)
    subprocess.run([exe, "run", "--name", box, *ulimit_args(), "--network", "none", "-v", f"{project}:/src:ro",
                    image(base, runtime_name), "cp", "-a", "/src", workdir], check=True, capture_output=True)
    subprocess.run([exe, "commit", box, name], check=True, capture_output=True)
    subprocess.run([exe, "rm", "-f", box], capture_output=True)
    return name


def swebench_instance(tmp_path: Path, runtime_name: str = "podman", name: str = "localhost/alight-test-swe:acme-calc",
                      project_hook: Callable[[Path], None] | None = None) -> tuple[dict, str]:
    """A SWE-bench-format instance built here: the mirror repository of test_tasks_swebench at its base commit in
    an image at /testbed, with its own eval script (test-file reset, test_patch inlined, markers, the test
    command), log_parser parse_log_pytest, eval_type pass_and_fail. Returns the row (its gold `patch` included)
    and the image. `project_hook(project)` may change the project's repository before the image is made (its HEAD is the
    base commit)."""
    from tests.test_tasks_swebench import git, make_mirror

    mirror_dir, line = make_mirror(tmp_path)
    project = tmp_path / "project"
    subprocess.run(["git", "clone", "-q", str(mirror_dir / "acme__calc"), str(project)], check=True)
    git(project, "checkout", "-q", line["base_commit"])
    (project / ".gitignore").write_text("conftest.py\n")
    git(project, "add", ".gitignore")
    git(project, "commit", "-qm", "ignore local conftest files")
    if project_hook is not None:
        project_hook(project)
    base = git(project, "rev-parse", "HEAD")
    image = image_with_project(name, project, runtime_name=runtime_name)
    eval_script = "\n".join([
        "#!/bin/bash", "set -uxo pipefail", "cd /testbed", "git config --global --add safe.directory /testbed",
        f"git checkout {base} tests/test_calc.py", "git apply -v - <<'EOF_114329324912'",
        line["test_patch"].rstrip("\n"), "EOF_114329324912", ": '>>>>> Start Test Output'",
        "python3 -m pytest -rA -p no:cacheprovider tests/test_calc.py", ": '>>>>> End Test Output'",
        f"git checkout {base} tests/test_calc.py", ""])
    row = {k: v for k, v in line.items() if not k.startswith("_")}
    row.update(base_commit=base, image=image, eval_script=eval_script, log_parser="parse_log_pytest",
               eval_type="pass_and_fail")
    return row, image


def _build(suite: str, include: list[str], tarball: Path) -> None:
    assert shutil.which("debootstrap"), "debootstrap is not installed: `apt-get install debootstrap`"
    with tempfile.TemporaryDirectory(prefix="alight-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        extra = [f"--include={','.join(include)}"] if include else []
        proc = subprocess.run(["debootstrap", "--variant=minbase", *extra, suite, str(root), MIRROR],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        (root / "etc" / "alight-test-image").write_text(MARK)
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)
