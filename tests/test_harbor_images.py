"""Harbor task images (tasks/harbor_image.py), built with the real podman from the examples' Dockerfiles on the
suite's local base image: tagged by the build context's content hash (an unchanged task is not rebuilt), progress
streamed, and every task that cannot build (a failing step, build_timeout_sec passed) named in one error."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from agentlightning_cli.errors import AlightError
from agentlightning_cli.sandbox.container import runtime_args
from agentlightning_cli.tasks import check_task_file
from agentlightning_cli.tasks.harbor_image import LABEL_TASK, task_images
from tests import container_support as cs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "harbor"


def test_builds_once_by_content_hash_and_uses_docker_image_as_given() -> None:
    exe = cs.podman()
    flags = runtime_args(exe, cs.image())
    tasks = {t.id: t for t in check_task_file(EXAMPLES).tasks}
    median, shout = tasks["alight-examples/fix-median"], tasks["alight-examples/shout"]
    subprocess.run([exe, "rmi", "-f", f"localhost/alight-harbor:{median.harbor.context_sha256[:32]}"],
                   capture_output=True)
    lines: list[str] = []
    images = task_images(exe, flags, [median, shout], log=lines.append)
    assert images["alight-examples/shout"] == "localhost/alight-test:bookworm-pytest"
    built = images["alight-examples/fix-median"]
    assert built.endswith(median.harbor.context_sha256[:32])
    assert any("building the image of alight-examples/fix-median" in line for line in lines)
    assert any(line.startswith("  alight-examples/fix-median: ") for line in lines)  # the build's own output
    label = subprocess.run([exe, "image", "inspect", "--format", f'{{{{index .Labels "{LABEL_TASK}"}}}}', built],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert label == "alight-examples/fix-median"
    inside = subprocess.run([exe, *flags, "run", "--rm", "--network", "none", *cs_ulimits(), built, "cat",
                             "/app/stats.py"], capture_output=True, text=True, check=True).stdout
    assert "def median(values):" in inside  # the COPY of its build context
    again: list[str] = []
    assert task_images(exe, flags, [median], log=again.append) == {"alight-examples/fix-median": built}
    assert again == []  # cached: nothing built, nothing said


def cs_ulimits() -> list[str]:
    from agentlightning_cli.sandbox.container import ulimit_args

    return ulimit_args()


def test_every_unbuildable_task_is_named_in_one_error(tmp_path: Path) -> None:
    exe = cs.podman()
    flags = runtime_args(exe, cs.image())
    for name, step, timeout in (("fails", "RUN exit 3", 300), ("slow", "RUN sleep 120 # item36-slow-build", 3)):
        d = tmp_path / "set" / name
        shutil.copytree(EXAMPLES / "hello-file", d)
        toml = (d / "task.toml").read_text().replace("alight-examples/hello-file", f"org/{name}")
        (d / "task.toml").write_text(toml.replace("build_timeout_sec = 300.0", f"build_timeout_sec = {timeout}"))
        (d / "environment" / "Dockerfile").write_text(f"FROM {cs.IMAGE}\n# {tmp_path}\n{step}\n")
    tasks = check_task_file(tmp_path / "set").tasks
    with pytest.raises(AlightError) as info:
        task_images(exe, flags, tasks, log=lambda line: None)
    text = info.value.message
    assert "2 Harbor task image(s) cannot be built" in text
    assert "org/fails (" in text and "build` exited" in text
    assert "org/slow (" in text and "took longer than build_timeout_sec = 3s" in text
    # The kill reached the RUN step: nothing of either build is left running.
    assert not processes_matching("item36-slow-build")


def processes_matching(text: str) -> list[int]:
    from tests.harness_support import processes_matching as matching

    return matching(text)


def test_stopped_build_leaves_no_working_container() -> None:
    """Checked after the unbuildable tasks above: buildah's working containers of their base are all gone."""
    exe = cs.podman()
    left = subprocess.run([exe, "ps", "-a", "--external", "--format", "{{.Names}} {{.Image}}"], capture_output=True,
                          text=True, check=True).stdout
    assert cs.IMAGE not in left, left
