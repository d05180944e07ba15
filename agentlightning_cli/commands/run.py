"""`alight run`: roll a task set out through a real harness, tasks x attempts, as round 0 of a run.

Order: every check first (run_checks.py), then the run directory lock and the cleanup of what a killed
earlier run left, then the upstream (vLLM through the shared lifecycle, or --upstream after a probe), the
proxy in run mode (unknown episodes get 404), the round (rollout/), the summary. Running the same command
again continues the same run: ended episodes are kept, unfinished ones redone.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from agentlightning_cli.commands import lifecycle
from agentlightning_cli.commands.context import size_for_harness, tools_warning
from agentlightning_cli.commands.run_checks import (RunOptions, check_numbers, check_training_settings,
                                                   container_images, load_task_subset, recipe_and_install,
                                                   swebench_environment_warning)
from agentlightning_cli.commands.sandbox_guard import refuse_exposures
from agentlightning_cli.errors import AlightError
from agentlightning_cli.rollout import stale
from agentlightning_cli.rollout.summary import RoundSummary
from agentlightning_cli.sandbox.exposure import OVERRIDE_FLAG

if TYPE_CHECKING:
    from agentlightning_cli.commands.run_upstream import Probe
    from agentlightning_cli.config import Settings
    from agentlightning_cli.harness.install import Installed
    from agentlightning_cli.harness.recipe import Recipe
    from agentlightning_cli.rollout.episode import RunContext
    from agentlightning_cli.serve.policy import PolicyServer
    from agentlightning_cli.store import Run, Store
    from agentlightning_cli.tasks.model import Task

VLLM_POLL_S = 1.0


class VLLMDied(AlightError):
    pass


def grading_offline(settings: Settings, tasks: list) -> bool:
    """The run graded SWE-bench rows officially, with the network withheld from the grading containers."""
    return (settings.sandbox == "container" and not settings.container.grading_network
            and any(t.swebench is not None and t.swebench.gradable for t in tasks))


def default_name(opts: RunOptions, recipe_name: str) -> str:
    """Deterministic, so the same command run again resumes the same run."""
    return f"{Path(opts.task_set).stem}-{recipe_name}"


def run(settings: Settings, opts: RunOptions) -> RoundSummary:
    check_numbers(opts)
    check_training_settings(settings, opts)
    from agentlightning_cli.train.trackers import check_installed, requested

    check_installed(requested(settings.train.report_to))  # a tracker missing: said before anything starts
    if opts.adapter is not None:  # --adapter: the serve.adapter setting, for this run
        opts.adapter = settings.serve.adapter = Path(opts.adapter).expanduser().resolve()
    if settings.serve.adapter is not None and opts.upstream is not None and opts.rounds > 1:
        raise AlightError("--adapter with --upstream serves the adapter in a run of one round only",
                          "train from it with servers alight starts (--model DIR --adapter DIR --rounds N)")
    tasks = load_task_subset(opts)
    _held_out(settings, opts, tasks)  # refused here, before anything starts, if it shares tasks with the train set
    recipe, installed = recipe_and_install(settings, opts.harness)
    from agentlightning_cli.sandbox.choice import resolve

    # Resolved once; every episode, setup and reward of the run gets it from the round context.
    settings.sandbox, settings.episode_limits = resolve(settings.sandbox, settings.episode_limits)
    # In a container a SWE-bench row runs in its own image; elsewhere nothing installs its project.
    environment_warning = swebench_environment_warning(tasks) if settings.sandbox != "container" else None
    if environment_warning:
        print(f"alight run: WARNING: {environment_warning}", file=sys.stderr, flush=True)
    from agentlightning_cli.rollout.harbor_episode import is_oracle
    from agentlightning_cli.tasks.harbor import check_running

    check_running(opts.task_set, tasks, settings.sandbox, recipe.name, is_oracle(recipe))
    if settings.sandbox == "bwrap":  # before anything starts: a machine that cannot sandbox gets the fix now
        from agentlightning_cli.sandbox import ensure_available

        ensure_available()
    elif settings.sandbox == "container":  # every image checked once now, not an error per episode later
        tasks = container_images(settings, tasks, recipe, installed)
    model = None
    if opts.upstream is not None and opts.model is not None:  # --rounds on servers alight did not start: the trainer's
        from agentlightning_cli.serve.policy import resolve_model
        from agentlightning_cli.serve.vllm import check_model_dir

        model = resolve_model(settings, opts.model)
        check_model_dir(model)
    elif opts.upstream is None:
        from agentlightning_cli.serve.policy import resolve_model
        from agentlightning_cli.serve.vllm import check_model_dir

        model = resolve_model(settings, opts.model)
        check_model_dir(model)
        if settings.serve.adapter is not None:  # an adapter made for another base: refused before vLLM starts
            from agentlightning_cli.serve.given_adapter import check_adapter_base

            check_adapter_base(Path(settings.serve.adapter), model)
        size_for_harness(settings, recipe, model)
        warning = tools_warning(recipe, model)
        if warning:
            print(f"alight run: WARNING: {warning}", file=sys.stderr, flush=True)
    if opts.max_calls is not None:
        settings.proxy.budgets.max_calls = opts.max_calls
    if opts.max_tokens is not None:
        settings.proxy.budgets.max_completion_tokens = opts.max_tokens
    runs_dir = None if opts.out is None else Path(opts.out)  # --out: that folder alone is alight's
    if opts.out is not None:
        settings.runs_dir, name = Path(opts.out).parent, Path(opts.out).name
    else:
        name = opts.name or default_name(opts, recipe.name)
    run_dir = (Path(settings.runs_dir) / name).absolute()
    # Before anything starts, once: no sandbox of this run may show the agent hidden tests, the store or HOME.
    exposed = refuse_exposures(settings, recipe, installed, allow=opts.unsafe_expose, task_set=Path(opts.task_set),
                               tasks=tasks, runs_dir=runs_dir, run_dir=run_dir)
    for line in exposed:
        print(f"alight run: WARNING: {OVERRIDE_FLAG}: the agent can read {line}", file=sys.stderr, flush=True)
    probe = None
    if opts.upstream is not None:
        from agentlightning_cli.commands.run_upstream import probe_upstreams, upstream_continuation
        from agentlightning_cli.serve.remote_policy import unkeyed_servers

        unkeyed = unkeyed_servers(opts.upstream, settings.serve.api_key, trains=opts.rounds > 1)
        if unkeyed:
            print(f"alight run: warning: {unkeyed}", file=sys.stderr, flush=True)

        probe = probe_upstreams(opts.upstream, trains=opts.rounds > 1,
                                api_key=getattr(settings.serve, "api_key", None))
        if probe.warning:
            print(f"alight run: WARNING: {probe.warning}", file=sys.stderr, flush=True)
        settings.proxy.sampling.token_ids = probe.token_ids
        settings.proxy.continuation = upstream_continuation(opts.upstream, probe, settings.proxy.continuation,
                                                            getattr(settings.serve, "api_key", None), "alight run")
        if probe.max_model_len:  # the servers' context: the longest row a round trains on
            settings.serve.max_model_len = probe.max_model_len
        if settings.serve.adapter is not None:  # the servers' model is the base it must have been trained on
            from agentlightning_cli.serve.given_adapter import check_adapter_base

            check_adapter_base(Path(settings.serve.adapter), probe.model, model_flag="an --upstream serving")
    run_dir.mkdir(parents=True, exist_ok=True)
    with stale.RunLock(run_dir):
        killed = stale.kill_run_processes(run_dir)
        if killed:
            print(f"alight run: killed {len(killed)} process(es) a stopped earlier run left behind", file=sys.stderr)
        if settings.sandbox == "container":
            from agentlightning_cli.sandbox.container import remove_under, runtime_path

            removed = remove_under(runtime_path(settings.container.runtime), run_dir)
            if removed:
                print(f"alight run: removed {removed} container(s) a stopped earlier run left behind", file=sys.stderr)
        store, run_row = _open(settings, name, run_dir, opts, recipe.name, model, recipe.model)
        try:
            summary = _run_rounds(settings, opts, store, run_row, run_dir, tasks, recipe, installed, model, probe)
        finally:
            store.close()
    if environment_warning:
        summary.notes.append(environment_warning)
    if probe is not None and probe.warning:
        summary.notes.append(probe.warning)
    if grading_offline(settings, tasks):
        summary.notes.append("SWE-bench grading ran without the network (container.grading_network: false), unlike "
                             "the official containers: an eval script that reinstalls its project can fail there")
    if exposed:
        summary.notes.append(f"{OVERRIDE_FLAG} was used: the sandbox showed the agent {len(exposed)} protected "
                             f"path(s) ({'; '.join(exposed)}), so its rewards may not measure what they should")
    return summary


def _held_out(settings: Settings, opts: RunOptions, tasks: list[Task]) -> Any:
    """--eval-task-set checked before anything starts (a task also in the train set is refused, naming it); the
    options then hold the resolved eval settings, so the run's snapshot records them and a resume compares them."""
    from agentlightning_cli.rollout.evaluation import held_out

    held = held_out(settings, opts, tasks)
    if held is not None:
        opts.eval_task_set, opts.eval_attempts, opts.eval_every = held.task_set, held.attempts, held.every
    return held


def _open(settings: Settings, name: str, run_dir: Path, opts: RunOptions, recipe_name: str,
          model: Path | None = None, harness_model: str | None = None) -> tuple[Store, Run]:
    from agentlightning_cli.run_snapshot import snapshot_settings
    from agentlightning_cli.store import Store

    store = Store.open(run_dir)
    # harness_model: the model name the harness's own calls ask for; a call asking for another is a helper call
    # (train/helper_calls.py).
    snapshot = {"command": "run", "harness": recipe_name, "harness_model": harness_model,
                "task_set": str(Path(opts.task_set).absolute()), "options": opts.snapshot(),
                "settings": snapshot_settings(settings, model)}
    row = store.get_run(name)
    if row is None:
        return store, store.create_run(name, snapshot)
    before = row.config.get("options", {})
    for key in ("harness", "task_set"):
        if row.config.get(key) not in (None, snapshot[key]):
            store.close()
            raise AlightError(f"run {name} was started with {key} {row.config.get(key)}, not {snapshot[key]}",
                              "pass another --name (or --out) for a different run")
    if before.get("adapter") != snapshot["options"].get("adapter"):
        store.close()
        raise AlightError(f"run {name} was started with --adapter {before.get('adapter')}, not {opts.adapter}",
                          "use the same --adapter to resume it, or another --name (or --out)")
    for key, flag in (("eval_task_set", "--eval-task-set"), ("eval_attempts", "--eval-attempts")):
        if before.get(key) is not None and before.get(key) != snapshot["options"].get(key):
            store.close()  # another held-out set (or k) would make the evaluations of one run incomparable
            raise AlightError(f"run {name} was started with {flag} {before.get(key)}, not {getattr(opts, key)}",
                              f"use the same {flag} to resume it, or another --name (or --out)")
    if before.get("attempts") not in (None, opts.attempts):
        store.close()
        raise AlightError(f"run {name} was started with --attempts {before.get('attempts')}, not {opts.attempts}",
                          "use the same --attempts to resume it, or another --name")
    return store, row


def _run_rounds(settings: Settings, opts: RunOptions, store: Store, run_row: Run, run_dir: Path, tasks: list[Task],
                recipe: Recipe, installed: Installed, model: Path | None, probe: Probe | None) -> RoundSummary:
    from agentlightning_cli.rollout.episode import RunContext
    from agentlightning_cli.rollout.sources import SourceCache

    # Everything the run's episodes share but the proxy, which _serve_round starts and adds.
    run_context = functools.partial(
        RunContext, store=store, recipe=recipe, installed=installed, run_id=run_row.id, run_dir=run_dir,
        sources=SourceCache(run_dir / "sources"), sandbox=settings.sandbox, limits=settings.episode_limits,
        container_runtime=settings.container.runtime, grading_network=settings.container.grading_network,
        harbor=settings.harbor, timeout_s=opts.timeout_s, max_turns=opts.max_turns, keep_workspaces=opts.keep_workspaces, seed=opts.seed,
        paired_seeds=opts.paired_seeds,
        setup_timeout_s=opts.setup_timeout_s, reward_timeout_s=opts.reward_timeout_s)
    done = _already_complete(store, run_row, tasks, opts)
    if done is not None:  # a rerun of a finished run: nothing to start
        return done
    executor = None
    if opts.executor == "ray":  # joined before vLLM starts: a cluster without episode slots is said at once
        from agentlightning_cli.rollout.ray_executor import RayExecutor

        executor = RayExecutor(opts.ray_address, opts.concurrency, settings.ray.queue_timeout_s)
        executor.connect()
        run_context = functools.partial(run_context, executor=executor)
    status = "failed"
    try:
        if opts.upstream is not None:
            remote = None
            if opts.rounds > 1:  # each round's adapter loaded on the given servers (serve/remote_policy.py)
                from agentlightning_cli.serve.remote_policy import RemotePolicy

                remote = RemotePolicy(run_dir, opts.upstream, probe.model, model, api_key=settings.serve.api_key)
            from agentlightning_cli.serve.given_adapter import upstream_policy

            with upstream_policy(settings.serve.adapter, opts.upstream, probe.model,
                                 settings.serve.api_key) as policy_name:
                summary = _run_loop(_serve_round(settings, opts, store, run_context, tasks, opts.upstream, remote,
                                                 policy_name, probe, model))
        else:
            with lifecycle.vllm_upstream(settings, run_dir, model, trains=opts.rounds > 1) as policy:
                summary = _run_loop(_serve_round(settings, opts, store, run_context, tasks, policy.base_urls, policy,
                                                 policy.policy, probe, model))
        status = "done"
        return summary
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        store.finish_run(run_row.id, status)
        if executor is not None:
            executor.close()


def _already_complete(store: Store, run_row: Run, tasks: list[Task], opts: RunOptions) -> RoundSummary | None:
    from agentlightning_cli.rollout.plan import plan_round

    from agentlightning_cli.rollout.evaluation import EVAL

    last = opts.rounds - 1
    rnd = next((r for r in store.list_rounds(run_row.id) if r.index == last), None)
    if rnd is None or plan_round(run_row.id, last, tasks, opts.attempts, store.list_episodes(round_id=rnd.id)).todo:
        return None
    if opts.eval_task_set is not None:  # the evaluation before the last round's episodes ran before them
        done = next((r for r in store.list_rounds(run_row.id, kind=EVAL) if r.index == last), None)
        if done is None or done.status != "done":
            return None
    print(f"alight run: every episode of run {run_row.name} has ended already", file=sys.stderr, flush=True)
    summary = _summary(store, run_row.id, rnd.id, opts, None, [t.id for t in tasks])
    summary.round = last
    return summary


def _summary(store: Store, run_id: str, round_id: str, opts: RunOptions, probe: Probe | None,
             task_ids: list[str]) -> RoundSummary:
    from agentlightning_cli.rollout.round import final_episodes
    from agentlightning_cli.rollout.summary import summarize

    eps = [e for e in final_episodes(store, run_id, round_id) if e.task_id in task_ids]
    calls = sum(s.calls for s in store.episode_summaries_by_id([e.id for e in eps])) if eps else 0
    notes = []
    trainable = probe is None or probe.token_ids
    if not trainable:
        notes.append(f"this run cannot be trained on: the upstream {', '.join(opts.upstream)} rejects token ids and logprobs, "
                     "so its calls were recorded without them")
    summary = summarize(store.get_run(run_id).name, 0, opts.attempts, eps, calls=calls, trainable=trainable,
                        notes=notes, order=task_ids)
    if opts.eval_task_set is not None:  # the held-out curve, next to this round's train reward
        from agentlightning_cli.rollout.heldout import evaluations

        summary.evaluations = evaluations(store, run_id, k=opts.eval_attempts)
    return summary


async def _serve_round(settings: Settings, opts: RunOptions, store: Store, run_context: Callable[..., RunContext],
                       tasks: list[Task], upstream_url: str | list[str], policy: PolicyServer | None,
                       policy_name: str | None,
                       probe: Probe | None,
                       model: Path | None = None) -> RoundSummary:
    from agentlightning_cli.commands.run_rounds import run_rounds
    from agentlightning_cli.harness.runner import EpisodeStopper

    stop = asyncio.Event()
    caught = lifecycle.stop_on_signals(stop)
    stopper = EpisodeStopper()  # the proxy stops an episode over budget; the episodes' runners listen
    async with lifecycle.proxy_running(store, upstream_url, settings.proxy, policy=policy_name, ad_hoc=False,
                                       on_budget_exceeded=stopper, upstream=policy,
                                       upstream_api_key=settings.serve.api_key,
                                       # --upstream URL --model DIR: the end-of-turn ids of exact continuation come
                                       # from DIR in a run of one round too (no RemotePolicy holds it then)
                                       model=model,
                                       # without DIR, the servers say which ids end a turn (under the probed name)
                                       served_model=probe.model if probe is not None else None) as proxy:
        shared = run_context(proxy=proxy, stopper=stopper)
        if shared.executor is not None:
            shared.executor.set_proxy(proxy.base_url)
        work = asyncio.ensure_future(run_rounds(settings, opts, shared, tasks, policy, model))
        waits = {work, asyncio.ensure_future(stop.wait())}
        if policy is not None and policy.starts_servers:
            waits.add(asyncio.ensure_future(_watch_vllm(policy)))
        done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for fut in pending:
            fut.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if work not in done or work.cancelled():
            for fut in done:
                if fut is not work and fut.exception() is not None:
                    raise fut.exception()  # vLLM died
            print("alight run: stopped; episodes that ended are kept, rerun the same command to resume",
                  file=sys.stderr, flush=True)
            lifecycle.raise_if_interrupted(caught)
            raise KeyboardInterrupt
        round_id, notes = work.result()  # re-raises a failure of the rounds themselves
        await asyncio.wait_for(proxy.drain(), timeout=lifecycle.DRAIN_TIMEOUT_S)
        if len(proxy.upstream_urls) > 1:
            notes.append(servers_note(proxy.session.report()))
        if shared.executor is not None and shared.executor.note():
            notes.append(shared.executor.note())
    summary = _summary(store, shared.run_id, round_id, opts, probe, [t.id for t in tasks])
    summary.round = store.get_round(round_id).index
    summary.notes = notes + summary.notes
    return summary


def servers_note(report: list[dict]) -> str:
    """The calls each upstream server took, and the ones taken out of service (why)."""
    parts = []
    for server in report:
        text = f"{server['url']} {server['calls']} call(s) of {server['episodes_taken']} episode(s)"
        if server["failures"]:
            text += (f", taken out of service {server['failures']} time(s) ({server['why']})"
                     + ("" if server["in_service"] else ", still out"))
        parts.append(text)
    return f"{len(report)} upstream servers, each episode kept on one: " + "; ".join(parts)


def _run_loop(main: Any) -> Any:
    """lifecycle.run_loop, keeping the coroutine's result (the summary)."""
    result: list[Any] = []

    async def keep() -> None:
        result.append(await main)

    lifecycle.run_loop(keep())
    return result[0]


async def _watch_vllm(policy: PolicyServer) -> None:
    """Returns (raising) only if vLLM exits while the round runs (with serve.replicas, the last one): the run stops
    with a clear error. A replica that exits while others run is said once; the proxy takes it out of service."""
    said: set[int] = set()
    while True:
        await asyncio.sleep(VLLM_POLL_S)
        ended = [(i, s, s.process.poll()) for i, s in enumerate(policy.servers) if s.process is not None]
        ended = [(i, s, code) for i, s, code in ended if code is not None]
        if ended and len(ended) == len(policy.servers):
            _, server, code = ended[-1]
            tail = server.log_tail(10) if hasattr(server, "log_tail") else ""
            raise VLLMDied(f"vLLM exited with code {code} in the middle of the run; episodes that ended are kept\n"
                           f"--- last lines of {server.log_path} ---\n{tail}",
                           "rerun the same command to resume once the cause is fixed")
        for i, server, code in ended:
            if i not in said:
                said.add(i)
                print(f"alight run: vLLM replica {i} ({server.base_url}) exited with code {code}; the others go on "
                      f"(its log: {server.log_path})", file=sys.stderr, flush=True)


def run_and_report(opts: RunOptions, as_json: bool) -> None:
    """The CLI's entry: settings, the run, then the summary (JSON on stdout, or the table)."""
    import json

    from agentlightning_cli.config import load_settings

    from agentlightning_cli.train.trackers import requested

    report_to = (requested(opts.report_to) or ["none"]) if opts.report_to else None  # --report-to: train.report_to
    summary = run(load_settings(flags={"sandbox": opts.sandbox, "serve": {"adapter": opts.adapter},
                                       "train": {"report_to": report_to}}), opts)
    if as_json:
        print(json.dumps(summary.to_json(), indent=2))
        return
    from rich.console import Console

    from agentlightning_cli.rollout.summary import render

    render(summary, Console())
