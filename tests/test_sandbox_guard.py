"""The sandbox guard through `alight run` with the default sandbox, laid out as a user lays a project out: the
recipe and its agent script at the project's root, the task set (with hidden tests) in tasks/, another suite's
hidden tests beside it, runs/ (the store, every workspace) below the same root.

A probe agent calls the model, then tries to read every protected thing by its host path and to list the folders
around it. It sees its own script and interpreter, never the recipe's folder as such. A recipe whose
`sandbox.read_only` names a protected place is refused before any episode, with the path, what it would expose
and the fix; the loudly named override lets it through and the summary says so.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from tests import run_support as rs

PROBE = '''#!/usr/bin/env python3
import json, os, sys, urllib.request
TARGETS = json.loads(TARGETS_JSON)
body = {"model": "policy", "messages": [{"role": "user", "content": open(sys.argv[1]).read()}]}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
answer = json.loads(urllib.request.urlopen(req, timeout=60).read())["choices"][0]["message"]["content"]
read, listed = {}, {}
for path in TARGETS["read"]:
    try:
        with open(path, "rb") as fh:
            read[path] = fh.read(64).decode("utf-8", "replace")
    except OSError as exc:
        read[path] = None
for path in TARGETS["list"]:
    try:
        listed[path] = sorted(os.listdir(path))
    except OSError:
        listed[path] = None
open("calc.py", "w").write("def add(a, b):\\n    return a + b\\n")
print(json.dumps({"event": "finished", "answer": answer, "read": read, "list": listed, "prefix": sys.prefix,
                  "cwd": os.getcwd()}))
'''


def _project(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "project"
    tasks = rs.calc_task_set(root / "tasks", [{"id": "calc", "prompt": "Fix add() in calc.py."}])
    other = root / "suite-b" / "hidden" / "test_secret.py"  # another suite's hidden test, not in this task set
    other.parent.mkdir(parents=True)
    other.write_text("OTHER SUITE SECRET")
    return {"root": root, "tasks": tasks, "own_hidden": root / "tasks" / "hidden" / "calc" / "test_hidden_calc.py",
            "other_hidden": other, "runs": root / "runs", "run": root / "runs" / "probe"}


def _write_probe(root: Path, targets: dict) -> Path:
    probe = root / "probe.py"
    probe.write_text(PROBE.replace("TARGETS_JSON", repr(json.dumps(targets))))
    probe.chmod(probe.stat().st_mode | stat.S_IXUSR)
    return probe


def _recipe(root: Path, command: list[str], read_only: list[str] | None = None) -> Path:
    extra = f"sandbox: {{read_only: {json.dumps(read_only)}}}\n" if read_only is not None else ""
    return rs.script_recipe(root, "probe", command, "a probe agent kept at the project's root", extra)


def _run(p: dict[str, Path], recipe: Path, *extra: str, upstream: str = "http://127.0.0.1:9") -> subprocess.CompletedProcess:
    # cwd is the project: runs_dir is its runs/, as for a user who runs alight there.
    return rs.alight(["run", "--task-set", str(p["tasks"]), "--harness", str(recipe), "--attempts", "2",
                      "--upstream", upstream, "--name", "probe", "--json", *extra], cwd=p["root"])


def _reports(run_dir: Path) -> list[dict]:
    out = []
    for log in sorted((run_dir / "logs" / "episodes").glob("*.stdout")):
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        out += [line for line in lines if line.get("event") == "finished"]
    return out


def _venv(tmp_path: Path) -> Path:
    """A virtualenv in the project folder (no pip: the standard library is all the probe needs)."""
    venv = tmp_path / "project" / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return venv


@pytest.mark.parametrize("how", ["script", "venv-python"])
def test_the_probe_runs_but_sees_nothing_protected(tmp_path: Path, how: str) -> None:
    p = _project(tmp_path)
    venv = _venv(tmp_path) if how == "venv-python" else None
    secrets = [p["own_hidden"], p["other_hidden"], p["run"] / "alight.db", p["tasks"], p["root"] / "probe.yaml"]
    listings = [p["root"], p["runs"], p["run"], p["run"] / "workspaces", p["root"] / "tasks"]
    _write_probe(p["root"], {"read": [str(s) for s in secrets], "list": [str(d) for d in listings]})
    if venv is None:
        command = ["./probe.py", "{{ prompt_file }}"]  # relative to the recipe file; its #! python from PATH
    else:
        command = ["{{ recipe_dir }}/env/bin/python3", "{{ recipe_dir }}/probe.py", "{{ prompt_file }}"]
    recipe = _recipe(p["root"], command)
    with FakeVLLM(FakeScript(turns=["I will fix it."], served_models=["policy-r0"])) as fake:
        proc = _run(p, recipe, upstream=fake.url)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    # It ran its own script and called the model: the episodes finished, were recorded and scored.
    assert summary["outcomes"] == {"finished": 2} and summary["tasks"][0]["mean_reward"] == 1.0, summary
    reports = _reports(p["run"])
    assert len(reports) == 2 and all(r["answer"] == "I will fix it." for r in reports)
    for report in reports:
        assert report["read"] == {str(s): None for s in secrets}, report["read"]
        listed = report["list"]
        # The recipe's folder shows only what the command needs: the script (and the virtualenv), nothing else.
        assert set(listed[str(p["root"])]) == ({"probe.py", "runs"} | ({"env"} if venv else set())), listed
        assert listed[str(p["root"] / "tasks")] is None
        # runs/ and the run directory hold only the episode's own mounts: no store, no other workspace.
        assert listed[str(p["runs"])] == ["probe"]
        assert "alight.db" not in listed[str(p["run"])]
        assert listed[str(p["run"] / "workspaces")] == [Path(report["cwd"]).name]
        if venv is not None:
            assert report["prefix"] == str(venv)  # its own interpreter, the virtualenv's
            assert sorted(listed[str(p["root"])]) == ["env", "probe.py", "runs"]


@pytest.mark.parametrize("place", ["task set", "runs_dir", "ALIGHT_HOME", "HOME"])
def test_a_read_only_mount_of_a_protected_place_is_refused_before_any_episode(tmp_path: Path, place: str) -> None:
    p = _project(tmp_path)
    _write_probe(p["root"], {"read": [], "list": []})
    named = {"task set": str(p["tasks"].parent), "runs_dir": str(p["runs"]), "ALIGHT_HOME": str(rs.harness_home()),
             "HOME": "~"}[place]
    what = {"task set": "the task set's folder", "runs_dir": "the run directory", "ALIGHT_HOME": "ALIGHT_HOME",
            "HOME": "the user's HOME"}[place]
    recipe = _recipe(p["root"], ["./probe.py", "{{ prompt_file }}"], read_only=[named])
    proc = _run(p, recipe)  # nothing listens upstream: the run must stop before it would ask
    assert proc.returncode == 1, proc.stderr
    assert "would expose protected paths" in proc.stderr and what in proc.stderr, proc.stderr
    assert os.path.expanduser(named) in proc.stderr and str(recipe) in proc.stderr
    assert "--unsafe-expose-protected-paths" in proc.stderr and "sandbox.read_only" in proc.stderr
    assert not p["run"].exists()  # refused before the run directory, the upstream or any episode


def test_the_override_mounts_it_and_the_summary_says_so(tmp_path: Path) -> None:
    p = _project(tmp_path)
    _write_probe(p["root"], {"read": [str(p["own_hidden"])], "list": []})
    recipe = _recipe(p["root"], ["./probe.py", "{{ prompt_file }}"], read_only=[str(p["tasks"].parent)])
    with FakeVLLM(FakeScript(turns=["ok"], served_models=["policy-r0"])) as fake:
        proc = _run(p, recipe, "--unsafe-expose-protected-paths", upstream=fake.url)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: --unsafe-expose-protected-paths" in proc.stderr
    summary = json.loads(proc.stdout)
    assert any("--unsafe-expose-protected-paths was used" in n and str(p["tasks"].parent) in n
               for n in summary["notes"]), summary["notes"]
    # What the override allowed is really visible: the hidden test, read by its host path.
    assert all(r["read"][str(p["own_hidden"])] for r in _reports(p["run"]))


def test_harness_check_and_doctor_apply_the_same_guard(tmp_path: Path) -> None:
    p = _project(tmp_path)
    _write_probe(p["root"], {"read": [], "list": []})
    recipe = _recipe(p["root"], ["./probe.py", "{{ prompt_file }}"], read_only=["~"])
    check = rs.alight(["harness", "check", str(recipe)], cwd=p["root"])
    assert check.returncode == 1 and "would expose protected paths" in check.stderr, check.stderr
    assert "the user's HOME" in check.stderr and "alight-check" not in check.stdout  # no episode started
    doctor = rs.alight(["doctor", "--recipe", str(recipe), "--task-set", str(p["tasks"]), "--json"], cwd=p["root"])
    rows = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    row = rows[f"sandbox mounts of {recipe}"]
    assert not row["ok"] and str(Path.home()) in row["detail"] and "sandbox.read_only" in row["fix"], row
    fine = _recipe(p["root"], ["./probe.py", "{{ prompt_file }}"])
    doctor = rs.alight(["doctor", "--recipe", str(fine), "--task-set", str(p["tasks"]), "--json"], cwd=p["root"])
    row = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}[f"sandbox mounts of {fine}"]
    assert row["ok"] and row["detail"] == "exposes nothing protected", row
