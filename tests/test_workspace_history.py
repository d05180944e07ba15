"""A workspace holds its base commit's history only (issue 33, item 4): a repository (a local one on the host, an
image's /testbed under `--sandbox container`) whose later commits are reachable by a tag, a branch, a remote-tracking
ref, a reflog entry, ORIG_HEAD/FETCH_HEAD, a stash, notes, a replace ref and as a dangling object. A script agent,
run through `alight run`, asks git inside its episode; it finds none of them, its object store is exactly
`git rev-list --objects <base>`, the summary says the workspaces were scrubbed, and the patch and the official
grading still work."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from agentlightning_cli.tasks import clean_history, load_tasks, prepare_workspace
from tests import container_support as cs
from tests import run_support as rs


def git(cwd: Path, *args: str) -> str:
    ident = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def add_later_history(repo: Path) -> dict[str, str]:
    """Later commits every way a repository keeps them, HEAD left at the base commit; returns name -> hash of
    each object past the base (their contents hold the word FUTURE)."""
    base = git(repo, "rev-parse", "HEAD")
    branch = git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    later: dict[str, str] = {}
    (repo / "future.txt").write_text("FUTURE fix on a branch\n")
    git(repo, "checkout", "-q", "-b", "future-branch")
    git(repo, "add", "future.txt")
    git(repo, "commit", "-qm", "FUTURE: the fix, on a branch")
    later["branch"] = git(repo, "rev-parse", "HEAD")
    later["branch_blob"] = git(repo, "rev-parse", "HEAD:future.txt")
    (repo / "future.txt").write_text("FUTURE fix behind a tag\n")
    git(repo, "commit", "-qam", "FUTURE: tagged")
    later["tagged"] = git(repo, "rev-parse", "HEAD")
    git(repo, "tag", "-a", "v9.0", "-m", "FUTURE release")
    later["tag_object"] = git(repo, "rev-parse", "v9.0")
    git(repo, "update-ref", "refs/remotes/upstream/main", later["tagged"])
    git(repo, "remote", "add", "upstream", "https://example.invalid/acme.git")
    git(repo, "checkout", "-q", branch)
    # Only a reflog entry (and ORIG_HEAD) keeps this one.
    (repo / "future.txt").write_text("FUTURE fix in the reflog\n")
    git(repo, "add", "future.txt")
    git(repo, "commit", "-qm", "FUTURE: reflogged")
    later["reflogged"] = git(repo, "rev-parse", "HEAD")
    git(repo, "reset", "-q", "--hard", base)
    (repo / ".git" / "FETCH_HEAD").write_text(f"{later['tagged']}\t\tbranch 'main' of https://example.invalid/acme\n")
    tracked = git(repo, "ls-files").splitlines()[0]
    (repo / tracked).write_text((repo / tracked).read_text() + "# FUTURE stashed\n")
    git(repo, "stash", "-q")
    later["stash"] = git(repo, "rev-parse", "refs/stash")
    git(repo, "notes", "add", "-m", "FUTURE note", base)
    later["notes"] = git(repo, "rev-parse", "refs/notes/commits")
    later["replace_blob"] = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo,
                                           input="FUTURE replacement\n", capture_output=True, text=True,
                                           check=True).stdout.strip()
    git(repo, "replace", "-f", git(repo, "rev-parse", f"{base}:{tracked}"), later["replace_blob"])
    git(repo, "pack-refs", "--all")
    git(repo, "repack", "-q", "-a", "-d")  # the later objects in the pack, beside the base's
    # Reachable from nothing at all: a loose dangling commit.
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input="FUTURE dangling fix\n",
                          capture_output=True, text=True, check=True).stdout.strip()
    tree = subprocess.run(["git", "mktree"], cwd=repo, input=f"100644 blob {blob}\tfuture.txt\n",
                          capture_output=True, text=True, check=True).stdout.strip()
    later["dangling"] = git(repo, "commit-tree", tree, "-p", base, "-m", "FUTURE: dangling")
    later["dangling_blob"] = blob
    assert git(repo, "rev-parse", "HEAD") == base and git(repo, "status", "--porcelain") == ""
    return later


PROBE = rs.CALL_MODEL_ONCE + '''import subprocess
words = open(sys.argv[1]).read().split()
base = next(w[5:] for w in words if w.startswith("BASE="))
later = [w[6:] for w in words if w.startswith("LATER=")]
def run(*args):
    p = subprocess.run(["git", *args], capture_output=True, text=True)
    return {"rc": p.returncode, "out": p.stdout, "err": p.stderr}
probe = {"status": run("status", "--porcelain"), "head": run("rev-parse", "HEAD"),
         "all_objects": run("cat-file", "--batch-all-objects", "--batch-check"),
         "reachable": run("rev-list", "--objects", base), "log_all": run("log", "--all", "--format=%H %s"),
         "show": {sha: run("show", sha) for sha in later}, "fsck": run("fsck", "--lost-found"),
         "refs": run("for-each-ref"), "reflog": run("reflog", "show", "--all"), "stash": run("stash", "list"),
         "remote": run("remote", "-v"), "grep": run("grep", "-r", "FUTURE", ".git"),
         "git_files": sorted(os.listdir(".git")), "cwd": os.getcwd(),
         "oldsub": [os.path.exists("oldsub/.git"), os.path.exists("oldsub/lib.txt")]}
if os.path.isdir("libsub"):
    probe["sub"] = {"head": run("-C", "libsub", "rev-parse", "HEAD"),
                    "status": run("-C", "libsub", "status", "--porcelain"),
                    "objects": run("-C", "libsub", "cat-file", "--batch-all-objects", "--batch-check"),
                    "reachable": run("-C", "libsub", "rev-list", "--objects", "HEAD"),
                    "log_all": run("-C", "libsub", "log", "--all", "--format=%H %s")}
if "FIX-IT" in words:
    open("calc/__init__.py", "w").write("def add(a, b):\\n    return a + b\\n")
open("git-probe.json", "w").write(json.dumps(probe))
print(json.dumps({"event": "finished"}))
'''


def _prompt(base: str, later: dict[str, str], extra: str = "") -> str:
    return " ".join([f"BASE={base}", *(f"LATER={sha}" for sha in later.values()), extra])


def _assert_only_base(probe: dict, base: str, later: dict[str, str]) -> None:
    assert probe["head"]["out"].strip() == base
    assert probe["all_objects"]["rc"] == 0 and probe["reachable"]["rc"] == 0
    stored = {line.split()[0] for line in probe["all_objects"]["out"].splitlines()}
    reachable = {line.split()[0] for line in probe["reachable"]["out"].splitlines()}
    assert stored == reachable and base in stored
    assert not set(later.values()) & stored
    assert "FUTURE" not in probe["log_all"]["out"] and len(probe["log_all"]["out"].splitlines()) >= 1
    for sha, shown in probe["show"].items():
        assert shown["rc"] != 0 and "FUTURE" not in shown["out"], (sha, shown)
    assert probe["fsck"]["rc"] == 0 and "dangling" not in probe["fsck"]["out"] + probe["fsck"]["err"], probe["fsck"]
    refs = probe["refs"]["out"].splitlines()
    assert len(refs) == 1 and refs[0].startswith(f"{base} commit\trefs/heads/"), refs
    assert probe["reflog"]["out"] == "" and probe["stash"]["out"] == "" and probe["remote"]["out"] == ""
    assert probe["grep"]["out"] == ""  # not in any file of .git either (config, packed-refs, FETCH_HEAD, logs)
    assert not {"packed-refs", "ORIG_HEAD", "FETCH_HEAD", "logs", "shallow", "modules"} & set(probe["git_files"])
    assert probe["status"]["out"] == "", probe["status"]  # the index is the base commit's, the files match it


def _rendered(summary: dict) -> str:
    """The summary as `alight run` prints it without --json."""
    import io

    from rich.console import Console

    from agentlightning_cli.rollout.summary import RoundSummary, TaskSummary, render

    text = io.StringIO()
    render(RoundSummary(**{**summary, "tasks": [TaskSummary(**t) for t in summary["tasks"]]}),
           Console(file=text, width=200))
    return text.getvalue()


def test_a_local_repository_gives_the_host_workspace_its_base_history_only(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "calc").mkdir()
    (repo / "calc" / "__init__.py").write_text("def add(a, b):\n    return a - b\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first")
    (repo / "README").write_text("calc\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    later = add_later_history(repo)
    tasks = tmp_path / "tasks.jsonl"
    rows = [{"id": f"t{i}", "prompt": _prompt(base, later), "repo": "repo", "base_commit": base[:12],
             "reward": "test -f git-probe.json"} for i in (1, 2)]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    agent = tmp_path / "probe.py"
    agent.write_text(PROBE)
    agent.chmod(0o755)
    recipe = rs.script_recipe(tmp_path, "probe", [str(agent), "{{ prompt_file }}"])
    out = tmp_path / "runs" / "host"
    with FakeVLLM(FakeScript(turns=["ok"], served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "2",
                          "--upstream", fake.url, "--out", str(out), "--sandbox", "bwrap", "--keep-workspaces",
                          "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["statuses"] == {"done": 4} and summary["sandbox"] == "bwrap", summary
    assert summary["history"]["episodes"] == 4 and summary["history"]["tasks"] == 2, summary["history"]
    assert summary["history"]["objects"] > 0 and summary["history"]["refs"] > 0
    assert "history:  4 workspace(s) of 2 task(s) scrubbed" in _rendered(summary)
    store, episodes = rs.read_store(out)
    try:
        for ep in episodes:
            _assert_only_base(json.loads((out / "workspaces" / ep.id / "git-probe.json").read_text()), base, later)
            assert ep.outcome_detail["history"]["scrubbed"] and ep.reward == 1.0
            assert b"git-probe.json" in store.get_patch(ep.id).patch  # the patch is still the agent's change
    finally:
        store.close()
    # Made once for the (repository, commit), reused by every workspace: one clean repository in the run's cache,
    # copied (never hard-linked: an agent writing its own store must not reach the cache or another workspace).
    assert len(list((out / "sources" / "history").glob("*.git"))) == 1
    packs = list((out / "workspaces").glob("*/.git/objects/pack/*.pack"))
    assert len(packs) == 4 and all(p.stat().st_nlink == 1 for p in packs)
    assert not list((out / "workspaces").glob("*/.git/objects/info/alternates"))
    assert git(repo, "rev-parse", "HEAD") == base and git(repo, "tag") == "v9.0"  # the source is untouched


def test_clean_history_keeps_a_shallow_repository_shallow(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    git(src, "init", "-q")
    for i in range(3):
        (src / "f.txt").write_text(f"{i}\n")
        git(src, "add", "f.txt")
        git(src, "commit", "-qm", f"c{i}")
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth=2", f"file://{src}", str(shallow))
    made = clean_history(shallow / ".git", None, tmp_path / "clean.git")
    assert git(made.git_dir, "rev-list", "--count", "base") == "2" and (made.git_dir / "shallow").is_file()
    assert made.scrubbed  # the clone's origin refs named the same commit, yet its reflog was there
    assert not made.dropped_objects


@pytest.fixture(scope="module")
def images_with_later_history(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[dict, str, dict]]:
    """SWE-bench instance images (each built once per test run and runtime) whose /testbed keeps later history."""
    built: dict[str, tuple[dict, str, dict]] = {}

    def get(runtime: str) -> tuple[dict, str, dict]:
        if runtime not in built:
            built[runtime] = _build_image(tmp_path_factory.mktemp(f"swe-{runtime}"), runtime)
        return built[runtime]

    return get


def _build_image(folder: Path, runtime: str) -> tuple[dict, str, dict[str, str]]:
    later: dict[str, str] = {}
    pinned: dict[str, str] = {}

    def hook(project: Path) -> None:
        # The clone the image is made from also has the mirror's fix (origin's branch, tag v1.1): left out too.
        later["mirror_fix"] = git(project, "rev-parse", "v1.1^{commit}")
        # A submodule pinned at its first commit, whose own repository (.git/modules) has a later one.
        sub = project.parent / "libsub-src"
        sub.mkdir()
        git(sub, "init", "-q")
        (sub / "lib.txt").write_text("pinned\n")
        git(sub, "add", "lib.txt")
        git(sub, "commit", "-qm", "sub pinned")
        pinned["libsub"] = git(sub, "rev-parse", "HEAD")
        (sub / "lib.txt").write_text("FUTURE in the submodule\n")
        git(sub, "commit", "-qam", "FUTURE: submodule")
        git(project, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "libsub")
        git(project / "libsub", "checkout", "-q", pinned["libsub"])
        git(project, "add", "libsub")
        git(project, "commit", "-qm", "pin libsub")
        later["submodule_future"] = git(sub, "rev-parse", "HEAD")
        # A submodule the base commit no longer has, still checked out: its `.git` file points into .git/modules.
        git(project, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "oldsub")
        git(project, "commit", "-qm", "add oldsub")
        git(project, "rm", "-q", "--cached", "oldsub")
        (project / ".gitignore").write_text((project / ".gitignore").read_text() + "oldsub/\n")
        git(project, "add", ".gitignore")
        git(project, "commit", "-qm", "drop oldsub")
        assert (project / "oldsub" / ".git").is_file()
        later.update(add_later_history(project))

    row, image = cs.swebench_instance(folder, runtime, name="localhost/alight-test-swe:later-history",
                                      project_hook=hook)
    return row, image, {**later, "_pinned": pinned["libsub"]}


@pytest.mark.parametrize("runtime", cs.RUNTIMES)
def test_an_images_project_gives_the_container_workspace_its_base_history_only(
        runtime: str, tmp_path: Path, images_with_later_history: Callable[[str], tuple[dict, str, dict]]) -> None:
    row, image, later = images_with_later_history(runtime)
    base = row["base_commit"]
    later = dict(later)
    pinned = later.pop("_pinned")
    row = {**row, "instance_id": "acme__calc-later", "problem_statement": _prompt(base, later, "FIX-IT")}
    tasks = tmp_path / "swe.jsonl"
    tasks.write_text(json.dumps(row) + "\n")
    agent = tmp_path / "probe.py"
    agent.write_text(PROBE)
    agent.chmod(0o755)
    recipe = rs.script_recipe(tmp_path, "probe", [str(agent), "{{ prompt_file }}"])
    out = tmp_path / "runs" / "container"
    with FakeVLLM(FakeScript(turns=["ok"], served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "2",
                          "--upstream", fake.url, "--out", str(out), "--sandbox", "container", "--keep-workspaces",
                          "--json"], cwd=tmp_path, env={"ALIGHT_CONTAINER__GRADING_NETWORK": "false",
                                                        "ALIGHT_CONTAINER__RUNTIME": runtime})
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    # Graded by the official code on the agent's patch: the fix passes.
    assert summary["statuses"] == {"done": 2} and summary["tasks"][0]["mean_reward"] == 1.0, summary
    assert summary["history"]["episodes"] == 2 and summary["history"]["refs"] >= 8, summary["history"]
    assert "history:  2 workspace(s) of 1 task(s) scrubbed" in _rendered(summary)
    store, episodes = rs.read_store(out)
    try:
        for ep in episodes:
            probe = json.loads((out / "workspaces" / ep.id / "git-probe.json").read_text())
            assert probe["cwd"] == "/testbed"
            _assert_only_base(probe, base, later)
            sub = probe["sub"]  # the submodule: its pinned commit's history alone, files and index as they were
            assert sub["head"]["out"].strip() == pinned and sub["status"]["out"] == "", sub
            assert {ln.split()[0] for ln in sub["objects"]["out"].splitlines()} == {
                ln.split()[0] for ln in sub["reachable"]["out"].splitlines()}
            assert "FUTURE" not in sub["log_all"]["out"] and later["submodule_future"] not in sub["objects"]["out"]
            assert probe["oldsub"] == [False, True]  # the dropped submodule's files stay, its dangling pointer not
            assert ep.reward_detail["grading"] == "official" and ep.reward_detail["resolved"]
            patch = store.get_patch(ep.id).patch
            assert b"calc/__init__.py" in patch and b".git/" not in patch
    finally:
        store.close()
    # Once per (image, base commit): the project's and its submodule's, for both attempts.
    assert len(list((out / "sources" / "history").glob("*.git"))) == 2


def test_a_local_task_workspace_outside_a_run_is_clean_too(tmp_path: Path) -> None:
    """prepare_workspace alone (no cache given): the same result, made for the call."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    later = add_later_history(repo)
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"id": "t", "prompt": "p", "reward": "true", "repo": "repo", "base_commit": base}) + "\n")
    (task,) = load_tasks(f)
    seen = []
    ws = prepare_workspace(task, tmp_path / "ws", sandbox="none", on_history=seen.append)
    stored = set(git(ws, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())
    assert stored == {line.split()[0] for line in git(ws, "rev-list", "--objects", base).splitlines()}
    assert not set(later.values()) & stored
    assert seen[0].scrubbed and seen[0].dropped_objects >= len(later) - 1


def test_the_cache_removes_the_least_recently_used_entry_no_one_holds(tmp_path: Path) -> None:
    from agentlightning_cli.tasks.history import cached_history

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    commits = []
    for i in range(3):
        (repo / "f.txt").write_text(f"{i}\n")
        git(repo, "add", "f.txt")
        git(repo, "commit", "-qm", f"c{i}")
        commits.append(git(repo, "rev-parse", "HEAD"))
    cache, made = tmp_path / "cache", []

    def maker(sha: str):
        return lambda dest: made.append(sha) or clean_history(repo / ".git", sha, dest)

    with cached_history(cache, "a", maker(commits[0]), budget_bytes=1) as held:
        with cached_history(cache, "b", maker(commits[1]), budget_bytes=1):
            pass
        assert (held.git_dir / "HEAD").is_file()  # in use: kept although past the budget
        with cached_history(cache, "c", maker(commits[2]), budget_bytes=1):
            pass
    assert not (cache / "b.git").exists() and (cache / "a.git").exists()  # b: least recently used, free
    with cached_history(cache, "a", maker(commits[0]), budget_bytes=1) as again:
        assert again.base == commits[0]
    assert made == commits  # a was reused, never made twice


def test_a_local_repository_that_borrows_objects_gives_a_workspace_that_borrows_none(tmp_path: Path) -> None:
    """`git clone --shared`: the local repository's objects live in another's store (alternates, followed on this
    machine); the workspace gets copies of the base commit's history alone, from neither store's later commits."""
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q")
    (origin / "a.txt").write_text("a\n")
    git(origin, "add", "a.txt")
    git(origin, "commit", "-qm", "base")
    base = git(origin, "rev-parse", "HEAD")
    later = add_later_history(origin)
    git(tmp_path, "clone", "-q", "--shared", str(origin), "repo")
    assert (tmp_path / "repo" / ".git" / "objects" / "info" / "alternates").is_file()
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"id": "t", "prompt": "p", "reward": "true", "repo": "repo", "base_commit": base}) + "\n")
    (task,) = load_tasks(f)
    ws = prepare_workspace(task, tmp_path / "ws", sandbox="none")
    assert not (ws / ".git" / "objects" / "info" / "alternates").exists()
    stored = set(git(ws, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())
    assert stored == {line.split()[0] for line in git(ws, "rev-list", "--objects", base).splitlines()}
    assert not set(later.values()) & stored and (ws / "a.txt").read_text() == "a\n"
