"""What the trainer does with one episode: its GRPO advantage and how much it counts, or why it trains nothing.

Computed with the trainer's own pure functions (train/advantages.py) on the episode's round, as train_round does:
`trainable_rewards` with the run's train.outcomes and reward.on_error, then `group_advantages` (group = the
episodes of one task in the round) with train.scale_rewards. The settings come from the run's snapshot
(run_snapshot.settings_of: either shape), a missing one from the defaults. The round's
episodes are one query (store.episode_summaries); no call body is read here.

Row-level facts come from the episode's rows (row_breaks.py): rows dropped for length train nothing, a kept row
weighs 1 (token-sum losses) or its share of the episode's tokens (grpo, sapo), and the round trains at one sampling temperature (the most common one over its rows: known
from the trainer's record once the round is trained), so rows sampled at another are dropped.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentlightning_cli.inspect.rows import Rows
from agentlightning_cli.run_snapshot import settings_of
from agentlightning_cli.store import CallSummary, Episode, EpisodeSummary, Store
from agentlightning_cli.train import advantages as adv
from agentlightning_cli.train.rows import call_temperature


def run_training_settings(run_config: dict[str, Any] | None) -> dict[str, Any]:
    """train.outcomes, reward.on_error and train.scale_rewards from the run's settings snapshot; `source` says
    which were recorded ("run") and which are today's defaults."""
    layer = settings_of(run_config)
    train, reward = layer.get("train") or {}, layer.get("reward") or {}
    found = {"outcomes": train.get("outcomes"), "on_error": reward.get("on_error"),
             "scale_rewards": train.get("scale_rewards")}
    missing = [k for k, v in found.items() if v is None]
    if missing:  # only then: the settings models cost ~0.3 s of imports
        from agentlightning_cli.config import RewardSettings, TrainSettings

        t, r = TrainSettings(), RewardSettings()
        defaults = {"outcomes": t.outcomes, "on_error": r.on_error, "scale_rewards": t.scale_rewards}
        found.update({k: defaults[k] for k in missing})
    found["outcomes"] = list(found["outcomes"])
    found["source"] = ("run" if not missing else "defaults" if len(missing) == 3
                       else f"run; defaults for {', '.join(missing)}")
    return found


def episode_training(store: Store, summary: EpisodeSummary, rows: Rows | None = None,
                     calls: list[CallSummary] | None = None) -> dict[str, Any]:
    """The episode's "training" JSON (README: inspect JSON shapes). `rows`/`calls`: its rows and call summaries,
    for the row count, weight and temperature; without them those fields are null."""
    ep, episode_id, round_index = summary.episode, summary.episode.id, summary.round_index
    out: dict[str, Any] = {"trains": False, "reason": None, "why": None, "reward": None, "advantage": None,
                           "scale": None, "group": None, "batch_std": None, "rows": None, "row_weight": None,
                           "temperature": None, "round": None, "settings": None, "note": None}
    if ep.run_id is None or ep.round_id is None:
        out.update(reason="no_round", why="not in a run's round: the trainer trains one round of a run at a time")
        return out
    held = store.get_round(ep.round_id)
    if held is not None and held.kind == "eval":
        out.update(reason="evaluation", why=f"a held-out evaluation episode (evaluation {held.index}, --eval-task-set):"
                                            " never trained on")
        return out
    run = store.get_run(ep.run_id)
    settings = run_training_settings(run.config if run else None)
    out["settings"], out["scale"] = settings, settings["scale_rewards"]
    outcomes, on_error, scale = settings["outcomes"], settings["on_error"], settings["scale_rewards"]
    # The one query for the round (summaries: ~1.6x cheaper per episode than list_episodes; same Episode rows).
    episodes = [s.episode for s in store.episode_summaries(run_id=ep.run_id, round_id=ep.round_id)]
    ep = next((e for e in episodes if e.id == episode_id), ep)
    try:
        kept, dropped = adv.trainable_rewards(episodes, outcomes, on_error)
        scored = adv.group_advantages(kept, scale)
    except ValueError as exc:  # a snapshot the trainer would refuse too
        out.update(reason="bad_settings", why=f"the run's settings snapshot: {exc}")
        return out
    dropped.update(scored.dropped)
    trained = store.get_train_round(ep.run_id, round_index) if round_index is not None else None
    out["round"] = {"index": round_index, "episodes": len(episodes), "with_reward": len(kept),
                    "scored": scored.episodes, "groups": scored.groups, "dropped": dict(sorted(dropped.items())),
                    "trained": trained is not None}
    if trained is not None and trained.detail.get("episodes") not in (None, scored.episodes):
        out["note"] = (f"the round was trained on {trained.detail['episodes']} episodes, not the {scored.episodes}"
                       " these settings score: `alight train` used other settings than the run's snapshot")
    if episode_id not in kept:
        _, why = adv.trainable_rewards([ep], outcomes, on_error)  # the trainer's own reason for this one
        out["reason"] = next(iter(why))
        out["why"] = _drop_text(out["reason"], ep, settings)
        return out
    task, reward = kept[episode_id]
    members = [r for t, r in kept.values() if t == task]
    mean = sum(members) / len(members)
    out["reward"] = reward
    out["group"] = {"task_id": ep.task_id, "episodes": len(members), "mean": mean, "std": adv._std(members),
                    "rewards": sorted(members)}
    where = f"task {ep.task_id or '(none)'} in round {round_index}"
    if episode_id not in scored.advantages:
        if len(members) < 2:
            out.update(reason="single_episode_group", why=f"the only episode of {where} with a reward: a group of"
                                                          " one has no baseline to compare with; the trainer drops it")
        else:
            out.update(reason="zero_variance_group",
                       why=f"zero-variance group: all {len(members)} episodes of {where} scored {_num(reward)}:"
                           " every advantage would be 0, so the trainer drops the group")
        return out
    advantage = scored.advantages[episode_id]
    out["advantage"] = advantage
    out["trains"] = True
    std = out["group"]["std"]
    if scale == "batch":
        out["batch_std"] = adv._std([kept[i][1] for i in scored.advantages])
    divisor = {"group": f" / (group std {std:.4g} + {adv.EPS:g})", "none": "",
               "batch": f" / (round std {out['batch_std'] or 0:.4g} + {adv.EPS:g})"}[scale]
    out["why"] = (f"advantage {advantage:+.4f} = (reward {_num(reward)} - mean {mean:.4g} of the {len(members)}"
                  f" episodes of {where}){divisor}")
    recorded = (trained.detail.get("advantages") if trained is not None else None)
    if recorded is not None:  # the trainer's own numbers: its baselines are over the episodes that made rows
        if episode_id not in recorded:
            out.update(trains=False, advantage=None, reason="no_rows",
                       why="the trainer left it out: none of its calls made a training row (errors, no token ids,"
                           " over-long, another temperature), so it is not in its group's mean and std either")
            return out
        if abs(recorded[episode_id] - advantage) > 1e-5:
            out["advantage"] = recorded[episode_id]
            out["note"] = (f"trained with advantage {recorded[episode_id]:+.4f}: the trainer's group mean and std"
                           " are over the episodes that made rows, and some of this group's made none")
    if rows is not None and calls is not None:
        loss_type = ((trained.detail.get("loss_type") if trained is not None else None)
                     or (settings_of(run.config if run else None).get("train") or {}).get("loss_type") or "dapo")
        _row_facts(out, rows, calls, trained.detail.get("temperature") if trained is not None else None, loss_type)
    return out


def _row_facts(out: dict[str, Any], rows: Rows, calls: list[CallSummary], round_temperature: float | None,
               loss_type: str = "dapo") -> None:
    """Rows kept, the weight of each (advantages.apply: 1 under token-sum losses; under grpo/sapo each row's share
    of the episode's trained tokens, shown as their mean 1/rows), and the round's one-temperature drop."""
    by_seq = {c.seq: c for c in calls}
    temps = [call_temperature(by_seq[r.calls[0]]) for r in rows.rows if r.dropped is None and r.calls]
    counts = Counter(temps)
    kept = len(temps) if round_temperature is None else counts.get(float(round_temperature), 0)
    out["temperature"] = {"round": round_temperature, "rows": {_num(t): n for t, n in sorted(counts.items())},
                          "dropped_rows": None if round_temperature is None else len(temps) - kept}
    if round_temperature is None and len(counts) > 1:
        out["note"] = ("its rows were sampled at several temperatures; the trainer keeps only the round's most common"
                       " one (known here once the round is trained)")
    out["rows"] = kept
    if kept:
        out["row_weight"] = 1.0 / kept if loss_type in adv.PER_ROW_MEAN_LOSSES else 1.0
        return
    out["trains"] = False
    if temps:
        out.update(reason="other_temperature",
                   why=f"its rows were sampled at temperature {', '.join(_num(t) for t in counts)}, the round trained"
                       f" at {_num(round_temperature)}: one temperature per round, the others' rows are dropped"
                       f" (it had {out['why']})")
    else:
        out.update(reason="no_rows", why="none of its calls makes a training row (see the rows: errors, no token"
                                         f" ids, over-long): it had {out['why']}")


def _drop_text(reason: str, ep: Episode, settings: dict[str, Any]) -> str:
    if reason == "abandoned_redone":
        return ("a stopped run left it unfinished and the rerun redid its slot under a retry id (`.1`, `.2`, ...):"
                " the retry trains in its place")
    if reason.startswith("outcome_"):
        if ep.outcome is None:
            return f"no outcome yet (status {ep.status}): only ended episodes train"
        return (f"outcome {ep.outcome} is not trained (train.outcomes: {', '.join(settings['outcomes'])}): a run"
                " that ended this way says nothing about the policy")
    if reason == "reward_error":
        return "its reward command failed (status reward_error) and reward.on_error is skip"
    if reason == "no_reward":
        return "it has no reward (not scored yet, or the reward was not a finite number)"
    return reason.replace("_", " ")


def _num(value: Any) -> str:
    return "?" if value is None else f"{float(value):g}"


def training_lines(training: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(style, line) for the top of the rows view and `show`: trains or not, why, and how much it counts."""
    if not training:
        return []
    t = training
    head = ("green", f"trains: advantage {t['advantage']:+.4f}") if t["trains"] else ("yellow",
                                                                                      f"trains nothing: {t['reason']}")
    out = [head, ("", f"  {t['why']}")]
    if t["trains"] and t["rows"] is not None:
        if t["row_weight"] != 1.0:
            out.append(("", f"  {t['rows']} rows, weighted by their share of the episode's trained tokens (mean"
                            f" {t['row_weight']:.4g}): the episode counts once, however its calls split into rows"))
        else:
            out.append(("", f"  {t['rows']} row{'s' if t['rows'] != 1 else ''}, each weighted 1: every trained token"
                            " counts once, however its calls split into rows"))
    if t["temperature"] and t["temperature"]["dropped_rows"]:
        out.append(("yellow", f"  {t['temperature']['dropped_rows']} of its rows dropped: sampled at another"
                              f" temperature than the round's {_num(t['temperature']['round'])}"))
    r, s = t["round"], t["settings"]
    if r is not None:
        dropped = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in r["dropped"].items() if v) or "nothing"
        out.append(("dim", f"  round {r['index']}: {r['scored']} of {r['episodes']} episodes scored in {r['groups']}"
                           f" groups; dropped: {dropped}{'' if r['trained'] else ' (not trained yet)'}"))
    if s is not None:
        out.append(("dim", f"  settings ({s['source']}): outcomes {', '.join(s['outcomes'])}; reward.on_error"
                           f" {s['on_error']}; scale_rewards {s['scale_rewards']}"))
    if t["note"]:
        out.append(("yellow", f"  note: {t['note']}"))
    return out
