"""The reward-curve PNG: mean reward (± std) and pass@1 per round, and training loss per step.

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


def write_plot(stats: dict[str, Any], out: Path) -> Path:
    """Draw `run_stats(...)` into `out` (PNG); returns the path."""
    plt = _pyplot()
    rounds = [r for r in stats["rounds"] if r["round"] is not None]
    steps = stats["train_steps"]
    fig, (ax_reward, ax_loss) = plt.subplots(1, 2, figsize=(11, 4), dpi=100)
    try:
        xs = [r["round"] for r in rounds]
        means = [r["reward_mean"] if r["reward_mean"] is not None else float("nan") for r in rounds]
        stds = [r["reward_std"] or 0.0 for r in rounds]
        ax_reward.errorbar(xs, means, yerr=stds, marker="o", capsize=4, label="mean reward ± std")
        ax_reward.plot(xs, [r["pass_at_1"] if r["pass_at_1"] is not None else float("nan") for r in rounds],
                       marker="s", linestyle="--", label="pass@1")
        ax_reward.set(title=f"{stats['run']}: reward per round", xlabel="round", ylabel="reward")
        ax_reward.set_xticks(xs)
        ax_reward.legend(loc="best")
        if steps:
            # Steps restart at 1 each round: lay them end to end, a dotted line where a round's training starts.
            starts = [(i, st["round"]) for i, st in enumerate(steps) if i == 0 or steps[i - 1]["round"] != st["round"]]
            ax_loss.plot(range(1, len(steps) + 1), [st["loss"] if st["loss"] is not None else float("nan")
                                                   for st in steps], marker=".")
            for x0, rnd in starts:
                ax_loss.axvline(x0 + 0.5, color="grey", linestyle=":", linewidth=0.8)
                ax_loss.annotate(f"r{rnd}", (x0 + 0.6, 1), xycoords=("data", "axes fraction"), va="top", fontsize=8)
            ax_loss.set(title="training loss per step", xlabel="step (all rounds)", ylabel="loss")
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
