"""The reward-curve PNG: train mean reward (95% interval clustered by task) and pass@1 per round, the held-out
pass@1 with its interval per evaluation, and training loss per step (integer steps, one labelled span per round).

matplotlib is an optional extra (`pip install 'agentlightning-cli[plot]'`), imported only here and only when a
plot is asked for; the Agg backend draws without a display (over SSH, in CI).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentlightning_cli.errors import AlightError


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise AlightError("--plot needs matplotlib, which is not installed",
                          hint="pip install 'agentlightning-cli[plot]' (scripts/install.sh installs it)") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bars(cis: list[dict[str, float] | None]) -> tuple[list[float], list[list[float]]]:
    """Interval dicts -> (estimates, [below, above]) for errorbar; missing ones are NaN with no bar."""
    nan = float("nan")
    ys = [c["estimate"] if c else nan for c in cis]
    below = [c["estimate"] - c["low"] if c else 0.0 for c in cis]
    above = [c["high"] - c["estimate"] if c else 0.0 for c in cis]
    return ys, [below, above]


def write_plot(stats: dict[str, Any], out: Path) -> Path:
    """Draw `run_stats(...)` into `out` (PNG); returns the path."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    rounds = [r for r in stats["rounds"] if r["round"] is not None]
    evals = stats.get("evaluations") or []
    steps = stats["train_steps"]
    fig, (ax_reward, ax_loss) = plt.subplots(1, 2, figsize=(12, 5), dpi=100)
    try:
        # Evaluation n scores the policy round n samples (after n trainings): both share the x axis.
        xs = [r["round"] for r in rounds]
        ys, err = _bars([r.get("reward_ci") for r in rounds])
        ax_reward.errorbar(xs, ys, yerr=err, marker="o", capsize=4, label="train: mean reward (95% CI, by task)")
        ax_reward.plot(xs, [r["pass_at_1"] if r["pass_at_1"] is not None else float("nan") for r in rounds],
                       marker="s", linestyle="--", label="train: pass@1")
        if evals:
            ex = [e["trainings"] for e in evals]
            ey, eerr = _bars([e["pass_at_1"] for e in evals])
            ax_reward.errorbar([x + 0.08 for x in ex], ey, yerr=eerr, marker="D", capsize=4, color="tab:green",
                               label="held-out: pass@1 (95% CI, by task)")
        ax_reward.set(title=f"{stats['run']}: reward per round", xlabel="round (policy after that many trainings)",
                      ylabel="reward / pass@1", ylim=(-0.05, 1.05) if _unit(rounds, evals) else None)
        every = sorted(set(xs) | {e["trainings"] for e in evals})
        ax_reward.set_xticks(every or [0])
        ax_reward.set_xlim(min(every or [0]) - 0.5, max(every or [0]) + 0.5)
        # Below the axes, never over a point or an interval.
        ax_reward.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8, frameon=False)
        if steps:
            # Steps restart at 1 each round: laid end to end (integer ticks), a line between two rounds' trainings
            # and each span labelled with the round it trained on, centred under the top edge.
            n = len(steps)
            ax_loss.plot(range(1, n + 1), [st["loss"] if st["loss"] is not None else float("nan") for st in steps],
                         marker=".")
            spans: list[list[int]] = []  # [round, first step, last step]
            for i, st in enumerate(steps, start=1):
                if spans and spans[-1][0] == st["round"]:
                    spans[-1][2] = i
                else:
                    spans.append([st["round"], i, i])
            for rnd, first, last in spans:
                if first > 1:
                    ax_loss.axvline(first - 0.5, color="grey", linestyle=":", linewidth=0.8)
                ax_loss.annotate(f"trained on round {rnd}", ((first + last) / 2, 1.01),
                                 xycoords=("data", "axes fraction"), ha="center", va="bottom", fontsize=8,
                                 color="grey", annotation_clip=False)
            ax_loss.set_xlim(0.5, n + 0.5)
            ax_loss.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
            ax_loss.set(xlabel="step (all rounds, end to end)", ylabel="loss")
            ax_loss.set_title("training loss per optimizer step", pad=18)  # room for the rounds' labels above
        else:
            ax_loss.text(0.5, 0.5, "no training steps recorded yet", ha="center", va="center",
                         transform=ax_loss.transAxes)
            ax_loss.set(title="training loss per step")
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, format="png")
    finally:
        plt.close(fig)
    return out


def _unit(rounds: list[dict[str, Any]], evals: list[dict[str, Any]]) -> bool:
    """Every reward drawn lies in [0, 1]: the axis is then fixed to it, so curves of runs compare by eye."""
    values = [v for r in rounds for v in (r.get("reward_ci") or {}).values()]
    values += [v for e in evals for m in ("pass_at_1",) for v in (e.get(m) or {}).values()]
    return all(0.0 <= v <= 1.0 for v in values)
