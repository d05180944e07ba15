"""Harbor task directories as task sets (tasks/harbor.py): examples/harbor is checked by the real `harbor`
package's own task model (0.25.0 in a Python 3.12 virtualenv, tests/harbor_support.py) and read the same way by
alight; every bad input is reported with its file and line, all of them at once; what alight cannot run is
refused by name; and `alight inspect export --format atif` writes trajectories the wheel's ATIF models accept."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning_cli.errors import AlightError
from agentlightning_cli.tasks import check_task_file
from agentlightning_cli.tasks.harbor import context_hash
from agentlightning_cli.testing.inspect_store import build_demo_run
from tests.harbor_support import run_in_harbor

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "harbor"
NAMES = ["alight-examples/fix-median", "alight-examples/hello-file", "alight-examples/shout",
         "alight-examples/word-report"]

# Harbor's own reading of each task directory: harbor.models.task.task.Task (the TaskConfig, the test script and
# input-path checks), with the fields alight maps, resolved the way Harbor resolves them.
HARBOR_READ = r"""
import json, sys, warnings
from pathlib import Path
warnings.simplefilter("ignore")
from harbor.models.task.task import Task
out = {}
for d in sys.argv[1:]:
    assert Task.is_valid_dir(d), d
    t = Task(d)
    c, e = t.config, t.config.environment
    phase = lambda p: (p.network_mode or e.network_mode).value
    out[t.name] = {"instruction": t.instruction, "docker_image": e.docker_image, "cpus": e.cpus,
                   "memory_mb": e.memory_mb, "storage_mb": e.storage_mb, "workdir": e.workdir, "env": e.env,
                   "build_timeout_s": e.build_timeout_sec, "agent_timeout_s": c.agent.timeout_sec,
                   "verifier_timeout_s": c.verifier.timeout_sec, "agent_network": phase(c.agent),
                   "verifier_network": phase(c.verifier), "has_solution": t.paths.discovered_solve_path is not None,
                   "metadata": c.metadata}
print(json.dumps(out))
"""


def alight(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentlightning_cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_examples_are_valid_harbor_tasks_and_alight_reads_them_as_harbor_does() -> None:
    dirs = sorted(str(p.parent) for p in EXAMPLES.rglob("task.toml"))
    harbor = run_in_harbor(HARBOR_READ, *dirs)
    assert sorted(harbor) == NAMES

    report = check_task_file(EXAMPLES)
    assert report.ok, [str(p) for p in report.problems]
    assert [t.id for t in report.tasks] == NAMES
    for task in report.tasks:
        h, want = task.harbor, harbor[task.id]
        got = {"instruction": task.prompt, "docker_image": h.docker_image, "cpus": h.cpus, "memory_mb": h.memory_mb,
               "storage_mb": h.storage_mb, "workdir": h.workdir, "env": h.env, "build_timeout_s": h.build_timeout_s,
               "agent_timeout_s": h.agent_timeout_s, "verifier_timeout_s": h.verifier_timeout_s,
               "agent_network": h.agent_network.mode, "verifier_network": h.verifier_network.mode,
               "has_solution": h.solution_dir is not None, "metadata": task.metadata}
        assert got == want, task.id
        assert task.kind == "harbor" and task.timeout_s == h.agent_timeout_s
        assert (h.build_context is None) == (h.docker_image is not None)
    # The four shapes the examples promise: a Dockerfile, a prebuilt image, the legacy allow_internet, a default.
    by = {t.id: t.harbor for t in report.tasks}
    assert by["alight-examples/shout"].docker_image == "localhost/alight-test:bookworm-pytest"
    assert by["alight-examples/word-report"].agent_network.mode == "no-network"  # allow_internet = false
    assert by["alight-examples/hello-file"].agent_network.mode == "public"  # Harbor's default


def test_tasks_check_shows_each_tasks_network_ask_and_environment() -> None:
    out = alight("tasks", "check", str(EXAMPLES))
    assert out.returncode == 0, out.stderr
    assert "kinds:        harbor 4" in out.stdout
    assert ("alight-examples/hello-file: Dockerfile (" in out.stdout
            and "network asked: agent public, verifier public" in out.stdout)
    shout = "alight-examples/shout: image localhost/alight-test:bookworm-pytest; network asked: agent no-network"
    assert shout in out.stdout
    one = json.loads(alight("tasks", "check", str(EXAMPLES / "fix-median"), "--json").stdout)
    row = one["summary"]["harbor"]
    assert [r["id"] for r in row] == ["alight-examples/fix-median"] and row[0]["workdir"] == "/app"
    assert row[0]["verifier_network"] == "no-network" and row[0]["solution"] is True


def make_task(root: Path, name: str, toml: str, *, instruction: str | None = "Do it.\n", test: bool = True,
              dockerfile: bool = True) -> Path:
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "task.toml").write_text(toml)
    if instruction is not None:
        (d / "instruction.md").write_text(instruction)
    if test:
        (d / "tests").mkdir()
        (d / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    if dockerfile:
        (d / "environment" / "Dockerfile").write_text("FROM localhost/alight-test:bookworm-pytest\n")
    return d


GOOD = 'schema_version = "1.4"\n[task]\nname = "org/{name}"\n[verifier]\ntimeout_sec = 60.0\n'


def problems_of(path: Path) -> list[tuple[str, int | None, str | None, str]]:
    report = check_task_file(path)
    assert not report.ok
    return [(p.file, p.line, p.field, str(p)) for p in report.problems]


def the_problem(path: Path, file: Path, line: int | None, contains: str) -> str:
    found = [text for f, ln, _, text in problems_of(path) if f == str(file) and ln == line]
    assert found, f"no problem in {file} at line {line}: {[t for *_, t in problems_of(path)]}"
    where = f"{file}:{line}:" if line is not None else f"{file}:"
    assert found[0].startswith(where) and contains in found[0], found[0]
    return found[0]


@pytest.mark.parametrize(("toml", "line", "contains"), [
    ('schema_version = "1.4"\n[agent]\ntimeout_sec = \n', 3, "bad TOML"),
    ('schema_version = "1.4"\n\n[environment]\ncpus = "many"\n', 4, "field 'environment.cpus': expected a number"),
    ('schema_version = "1.4"\n[verifier]\ntimeout_sec = 60\n[environment]\nmemory_mb = [1]\n', 5,
     "expected an integer"),
    ('schema_version = "9.0"\n', 1, "unknown schema_version '9.0'"),
    ('[task]\nname = "no-slash"\n', 2, "is not 'org/name'"),
    ('[environment]\nnetwork_mode = "sometimes"\n', 2, "'sometimes' is not one of"),
    ('[environment]\nallowed_hosts = ["pypi.org"]\n', 1, "allowed_hosts is only valid when network_mode = 'allowlist'"),
    ('[agent]\ntimeout_sec = -5\n', 2, "must be > 0"),
    ('[environment]\nworkdir = "app"\n', 2, "not an absolute path"),
])
def test_bad_task_toml_names_file_and_line(tmp_path: Path, toml: str, line: int, contains: str) -> None:
    d = make_task(tmp_path, "t", toml)
    the_problem(d, d / "task.toml", line, contains)


@pytest.mark.parametrize(("toml", "line", "contains"), [
    ('[environment]\ncpus = 1\ngpus = 1\n', 3, "unsupported: gpus = 1"),
    ('[environment]\nos = "Windows"\n', 2, "unsupported: os = 'windows'"),
    ('[environment.tpu]\ntype = "v6e"\ntopology = "2x2"\n', 1, "unsupported: TPU"),
    ('schema_version = "1.4"\n[[steps]]\nname = "one"\n', 2, "unsupported: multi-step"),
    ('[verifier]\nenvironment_mode = "separate"\n', 2, "unsupported: a separate verifier container"),
    ('[[environment.mcp_servers]]\nname = "x"\ntransport = "sse"\nurl = "http://127.0.0.1:1/"\n', 1,
     "unsupported: MCP servers"),
])
def test_unsupported_features_are_refused_by_name(tmp_path: Path, toml: str, line: int, contains: str) -> None:
    d = make_task(tmp_path, "t", toml)
    the_problem(d, d / "task.toml", line, contains)


def test_missing_files_compose_and_no_image_name_their_file(tmp_path: Path) -> None:
    d = make_task(tmp_path, "t", GOOD.format(name="t"), instruction=None, test=False, dockerfile=False)
    (d / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    the_problem(d, d / "instruction.md", None, "missing: a Harbor task needs instruction.md")
    the_problem(d, d / "tests" / "test.sh", None, "missing: the verifier script")
    the_problem(d, d / "environment" / "docker-compose.yaml", None, "unsupported: compose environments")
    the_problem(d, d / "task.toml", None, "no image: set [environment].docker_image or add")


def test_every_problem_of_every_task_is_reported_at_once(tmp_path: Path) -> None:
    """A dataset with three broken tasks (and one good one) lists all their problems, not the first."""
    make_task(tmp_path / "set", "good", GOOD.format(name="good"))
    a = make_task(tmp_path / "set", "a", '[environment]\ncpus = "x"\nmemory_mb = "y"\n', test=False)
    b = make_task(tmp_path / "set" / "deeper", "b", "schema_version = \n")
    c = make_task(tmp_path / "set", "c", GOOD.format(name="good"))  # the same name as `good` (found later)
    found = {(Path(f).relative_to(tmp_path).as_posix(), ln) for f, ln, _, _ in problems_of(tmp_path / "set")}
    assert found == {("set/a/task.toml", 2), ("set/a/task.toml", 3), ("set/a/tests/test.sh", None),
                     ("set/deeper/b/task.toml", 1), ("set/good/task.toml", None)}
    report = check_task_file(tmp_path / "set")
    assert [t.id for t in report.tasks] == ["org/good"]
    assert [t.harbor.task_dir for t in report.tasks] == [c]  # folders in path order: a, c, deeper/b, good
    assert any("duplicate task name 'org/good'" in str(p) and str(c) in str(p) for p in report.problems)
    out = alight("tasks", "check", str(tmp_path / "set"), "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 1 and len(data["problems"]) == 5
    assert {p["file"] for p in data["problems"]} >= {str(a / "task.toml"), str(b / "task.toml")}


def test_a_folder_without_tasks_and_a_nameless_task(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    the_problem(tmp_path / "empty", tmp_path / "empty", None, "is a folder with no Harbor task directory")
    d = make_task(tmp_path, "plain-name", '[verifier]\ntimeout_sec = 30\n')
    assert [t.id for t in check_task_file(d).tasks] == ["plain-name"]  # Harbor's rule: the folder's name
    bad = make_task(tmp_path, "has space", '[verifier]\ntimeout_sec = 30\n')
    the_problem(bad, bad / "task.toml", None, "is not a usable task name")


def test_names_with_a_slash_pass_tasks_and_a_harbor_held_out_set_is_refused_cleanly(tmp_path: Path) -> None:
    """Task names are "org/name": --tasks takes them as they are (ids are never used as paths: workspaces and
    episode folders are named by episode id). A Harbor dataset as --eval-task-set is refused before anything
    starts (tests/test_harbor_run.py runs them as the train set)."""
    from agentlightning_cli.commands.run_checks import RunOptions, load_task_subset
    from agentlightning_cli.tasks.harbor import refuse_held_out

    opts = RunOptions(task_set=EXAMPLES, harness="mini-swe-agent", tasks=["alight-examples/shout"])
    assert [t.id for t in load_task_subset(opts)] == ["alight-examples/shout"]
    with pytest.raises(AlightError, match=r"is a Harbor dataset \(4 task\(s\)\); evaluating Harbor tasks inside"):
        refuse_held_out(EXAMPLES, check_task_file(EXAMPLES).tasks)


def test_context_hash_follows_the_build_context(tmp_path: Path) -> None:
    src = EXAMPLES / "fix-median" / "environment"
    ctx = tmp_path / "ctx"
    shutil.copytree(src, ctx)
    assert context_hash(ctx) == context_hash(src)
    (ctx / "stats.py").write_text((ctx / "stats.py").read_text() + "# changed\n")
    changed = context_hash(ctx)
    assert changed != context_hash(src)
    (ctx / "stats.py").chmod(0o755)
    assert context_hash(ctx) != changed


ATIF_CHECK = r"""
import json, sys, warnings
from pathlib import Path
from harbor.models.trajectories.trajectory import Trajectory
out = {}
for f in sorted(Path(sys.argv[1]).glob("*.json")):
    t = Trajectory.model_validate_json(f.read_text())
    out[f.stem] = {"steps": len(t.steps), "agent": t.agent.name, "sources": [s.source for s in t.steps],
                   "tool_calls": sum(len(s.tool_calls or []) for s in t.steps),
                   "linked": sum(1 for s in t.steps if s.observation for r in s.observation.results
                                 if r.source_call_id),
                   "token_ids": sum(len(s.metrics.completion_token_ids or []) for s in t.steps if s.metrics)}
print(json.dumps(out))
"""


def test_atif_export_validates_against_harbors_trajectory_model(tmp_path: Path) -> None:
    demo = build_demo_run(tmp_path / "runs" / "demo")
    out = alight("inspect", "export", "demo", "--format", "atif", "--out", str(tmp_path / "atif"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"wrote {len(demo.episodes)} ATIF trajectories" in out.stderr
    checked = run_in_harbor(ATIF_CHECK, str(tmp_path / "atif"))
    assert sorted(checked) == sorted(demo.episodes)
    for ep_id, t in checked.items():
        assert t["sources"][:2] == ["system", "user"], (ep_id, t)
        assert t["tool_calls"] >= 1 and t["linked"] >= 1, (ep_id, t)  # tool results tied to their calls
    # The failed episode's upstream error is told as a system step, not dropped.
    assert checked[demo.failed]["sources"][-1] == "system"
    # Without --out: one trajectory a line on stdout, the same documents.
    lines = alight("inspect", "export", "demo", "--format", "atif", cwd=tmp_path).stdout.splitlines()
    assert len(lines) == len(demo.episodes)
    first = json.loads(lines[0])
    assert first["schema_version"] == "ATIF-v1.6" and first["extra"]["alight"]["run"] == "demo"


ATIF_STEPS = r"""
import json, sys
from pathlib import Path
from harbor.models.trajectories.trajectory import Trajectory
t = Trajectory.model_validate_json(next(Path(sys.argv[1]).glob("*.json")).read_text())
print(json.dumps([[s.source, bool(s.is_copied_context), s.message[:40]] for s in t.steps]))
"""


def test_atif_marks_history_a_harness_rewrote_as_copied_context(tmp_path: Path) -> None:
    """A harness that compacts its history (the third call's request no longer starts with what came before)
    restarts the story; its repeated turns are `is_copied_context`, which ATIF readers do not train on."""
    from agentlightning_cli.store import Store
    from agentlightning_cli.testing.call_bodies import Step, conversation

    steps = [Step(text="Looking.", tool=("bash", {"command": "ls"}), tool_output="calc.py"),
             Step(tool=("bash", {"command": "cat calc.py"}), tool_output="def add(a, b): return a - b"),
             Step(text="Done.")]
    with Store.open(tmp_path / "runs" / "compact") as store:
        run = store.create_run("compact", {})
        ep = store.create_episode(run.id, None, "t", 0, "mini-swe-agent", "k")
        records = conversation(ep.id, "openai-chat", "Fix add().", steps)
        body = json.loads(records[2].client_request)
        system, rest = body["messages"][0], body["messages"][1:]
        body["messages"] = [system, {"role": "user", "content": "Summary so far: add() is wrong."}, *rest[-1:]]
        records[2].client_request = json.dumps(body).encode()
        store.add_calls(records)
    out = alight("inspect", "export", "compact", "--format", "atif", "--out", str(tmp_path / "atif"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    told = run_in_harbor(ATIF_STEPS, str(tmp_path / "atif"))
    assert [s[:2] for s in told[:4]] == [["system", False], ["user", False], ["agent", False], ["agent", False]]
    copied = [s for s in told if s[1]]
    assert [s[0] for s in copied] == ["system", "user", "system"], told  # system prompt, summary, orphan result
    assert copied[1][2].startswith("Summary so far") and told[-1][:2] == ["agent", False]


def test_a_harbor_task_directory_is_a_place_no_sandbox_may_show() -> None:
    """Its tests/ and solution/ go into a container only after the agent (solution/ only for the oracle): a
    recipe's sandbox.read_only naming the directory is refused like any hidden file."""
    from agentlightning_cli.sandbox.exposure import Mount, exposures, protected_places

    task = next(t for t in check_task_file(EXAMPLES).tasks if t.id == "alight-examples/fix-median")
    places = protected_places(tasks=[task])
    found = exposures([Mount(task.harbor.task_dir / "tests", "sandbox.read_only of my.yaml")], places)
    assert len(found) == 1 and "task alight-examples/fix-median's Harbor directory" in found[0], found
