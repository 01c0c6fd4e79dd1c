"""ablate's figures: the measure over all tasks against episodes, wall-clock and PPO updates
(ablations.png), and per task against wall-clock (ablations_by_task.png). One line per run, one colour per
configuration (its place in ``order``)."""

from __future__ import annotations

import math
from pathlib import Path

from app.measures import LAST, last_at_update


def curve_key(measure: str) -> str:
    """The column a curve's measure is under: success_rate, or the measure's own name."""
    return "success_rate" if measure == "success" else measure


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _color(config: str, order: list[str]) -> str:
    return f"C{order.index(config) % 10}" if config in order else "C9"


def update_curve(row: dict) -> tuple[list[int], list[float | None]]:
    """A run's measure at every PPO update it reached: each task's last LAST episodes up to it
    (``last_at_update``), the mean over tasks; None until every task has played under PPO."""
    xs = list(range(1, row["updates"] + 1))
    return xs, [last_at_update(row["by_update"], u) for u in xs]


def plot(results: list[dict], path: Path, measured: str, window: int, order: list[str]) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.2))
    key = curve_key(measured)
    for config in dict.fromkeys(r["config"] for r in results):
        runs = [r for r in results if r["config"] == config and r["curve"]]
        for i, r in enumerate(runs):
            ys = [c[key] for c in r["curve"]]
            label = config if i == 0 else None
            axes[0].plot([c["episodes"] for c in r["curve"]], ys, color=_color(config, order), alpha=0.8, lw=1.2,
                         label=label)
            axes[1].plot([c["seconds"] / 60 for c in r["curve"]], ys, color=_color(config, order), alpha=0.8,
                         lw=1.2, label=label)
        for i, r in enumerate(rr for rr in results if rr["config"] == config and rr.get("by_update")):
            xs, ys = update_curve(r)
            axes[2].plot(xs, [math.nan if y is None else y for y in ys], color=_color(config, order), alpha=0.8, lw=1.2,
                         label=config if i == 0 else None)
    name = measured.replace("_", " ")
    axes[2].set(xlabel="PPO updates", ylabel=f"each task's last {LAST} up to it, mean",
                title=f"{name} against PPO updates")
    axes[0].set(xlabel="RL episodes", ylabel=f"{name} (windows of {window})", title=f"{name} against episodes")
    axes[1].set(xlabel="minutes since the run's first episode", title=f"{name} against wall-clock")
    for ax in axes:
        ax.grid(alpha=0.3)
        if measured == "success":
            ax.set_ylim(0, 1)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_by_task(results: list[dict], path: Path, measured: str, window: int | str, order: list[str]) -> list[str]:
    """One panel per task (``task_curves`` of each result: rows kept from before it was measured
    have none and are left out); the tasks drawn, in the panels' order. None drawn: no file (one
    left by an earlier report is removed). ``window``: what each point averages, for the y label (a
    count of episodes, or words such as "120 s")."""
    tasks = sorted({t for r in results for t, c in (r.get("task_curves") or {}).items() if c})
    if not tasks:
        path.unlink(missing_ok=True)
        return []
    plt = _pyplot()
    cols = min(len(tasks), 4)
    rows = math.ceil(len(tasks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    key, labelled = curve_key(measured), set()
    for ax, task in zip(axes.flat, tasks):
        for r in results:
            curve = (r.get("task_curves") or {}).get(task) or []
            if not curve:
                continue
            label = None if r["config"] in labelled else r["config"]
            labelled.add(r["config"])
            ax.plot([c["seconds"] / 60 for c in curve], [c[key] for c in curve], color=_color(r["config"], order),
                    alpha=0.75, lw=1.1, marker="o", ms=2.5, label=label)  # a run with one window: a dot
        ax.set(title=task, xlabel="minutes since the run's first episode")
        ax.grid(alpha=0.3)
        if measured == "success":
            ax.set_ylim(0, 1)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    axes[0][0].set_ylabel(f"{measured.replace('_', ' ')} (windows of {window})")
    handles = [h for ax in axes.flat for h in ax.get_legend_handles_labels()[0]]
    fig.tight_layout()
    # above the panels, outside them; the saved figure grows to hold it
    legend = fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(handles), 4),
                        fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight", bbox_extra_artists=[legend])
    plt.close(fig)
    return tasks
