"""Whether this machine can sandbox episodes (`alight doctor`, and the start of a run): bubblewrap present and
able to create user, PID and network namespaces, plus whether per-episode pids cgroups are available."""

from __future__ import annotations

from agentlightning_cli.errors import AlightError
from agentlightning_cli.sandbox.bwrap import ensure_available
from agentlightning_cli.sandbox.limits import PidsCgroup


def sandbox_status() -> dict:
    """{ok, version, detail, fix} for `sandbox: bwrap` on this machine."""
    try:
        bwrap = ensure_available()
    except AlightError as exc:
        return {"ok": False, "version": None, "detail": exc.message, "fix": exc.hint}
    import subprocess

    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip() or None
    cgroup = PidsCgroup.create(1)
    if cgroup is not None:
        cgroup.remove()
    limits = ("process limit enforced by a pids cgroup" if cgroup is not None
              else "no writable pids cgroup: the process limit is watched, not enforced by the kernel")
    from agentlightning_cli.sandbox import exits

    notices = ("a file size / CPU limit hit anywhere in an episode ends it at once (kernel exit notices)"
               if exits.listener() is not None else
               "no kernel exit notices: a file size limit hit deep in an episode is found when it ends")
    return {"ok": True, "version": version,
            "detail": f"{bwrap}: user, PID and network namespaces work; {limits}; {notices}",
            "fix": None}


def container_status(runtime_name: str = "auto", image: str | None = None, required: bool = False) -> dict:
    """{ok, version, detail, fix} for `sandbox: container`: the runtime, and with an image (`container.image`)
    whether a container from it starts here and this machine's Python runs in it. Not required (ok) when the
    sandbox setting is another."""
    import subprocess

    from agentlightning_cli.sandbox import container

    try:
        runtime = container.runtime_path(runtime_name)
    except AlightError as exc:
        return {"ok": not required, "version": None, "fix": exc.hint,
                "detail": exc.message + ("" if required else " (needed only for `sandbox: container`)")}
    version = subprocess.run([runtime, "--version"], capture_output=True, text=True).stdout.strip() or None
    if image is None:
        return {"ok": True, "version": version, "fix": None,
                "detail": f"{runtime}; set `container.image` (or give tasks an `image`) and doctor checks it runs"}
    try:
        flags = container.runtime_args(runtime, image)
        container.check_image(runtime, image)
    except AlightError as exc:
        return {"ok": False, "version": version, "detail": exc.message, "fix": exc.hint}
    return {"ok": True, "version": version, "fix": None,
            "detail": f"{runtime} {' '.join(flags)} runs {image}, and this machine's Python runs in it".replace("  ", " ")}
