"""The demo's report: Markdown with PNG plots, every figure computed in ClickHouse by a query the
report prints beside it (app.demo_queries)."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from app import demo_queries as Q  # noqa: E402
from infra.clickhouse.query import execute, render  # noqa: E402
from infra.runtime.settings import Settings  # noqa: E402
from trainer.core import metric_names as M

log = logging.getLogger("flywheel.report")
TARGETS = {"click-test": 0.95, "click-test-2": 0.90}


@dataclass
class RunInfo:
    run_id: str
    policy: str
    mode: str  # "async" | "sync"
    started_at: float
    ended_at: float
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def query(settings: Settings, sql: str) -> tuple[list[str], list[tuple]]:
    cols, rows, _ = execute(settings, sql)
    return cols, rows


def _series(rows: list[tuple], key_idx: int, x_idx: int, y_idx: int) -> dict[str, tuple[list, list]]:
    out: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for r in rows:
        xs, ys = out[r[key_idx]]
        xs.append(r[x_idx])
        ys.append(r[y_idx])
    return dict(out)


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def bucket_seconds(duration_s: float, points: int = 30) -> int:
    """A bucket width that gives a run about ``points`` points: 2 s for a 1-minute run, 30 s for
    15 minutes, 120 s for an hour (never under 2 s or over 10 min)."""
    return int(min(600, max(2, round(duration_s / points))))


def curve_measure(rows) -> str:
    """What the learning curve plots (``Q.success_over_time``'s rows, which measure each one is
    last): success, a game's normalised score where every task is a game (its success, 0 or 1,
    is only reaching the heuristic's mean), or both where the run mixes them."""
    kinds = {r[4] for r in rows if len(r) > 4}
    if "normalised score" not in kinds:
        return "success"
    return "normalised score" if kinds == {"normalised score"} else "success, a game's normalised score"


def taught_line(config: dict[str, Any]) -> str:
    """The run's "Taught by: ..." sentence (``app.taught``, recorded in its config); empty for a run
    recorded before it was."""
    return str((config.get("taught_by") or {}).get("line") or "")


def curve_style(k: int) -> dict[str, Any]:
    """The ``k``-th curve's look: the colour cycle's colours, then the same colours again dashed
    with another marker, and so on (past ten tasks a colour repeated with nothing to tell the two
    curves apart)."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    turn = k // len(colours)
    return {"color": colours[k % len(colours)], "ls": ("-", "--", ":", "-.")[turn % 4], "marker": ".xo+"[turn % 4]}


def plot_learning_curve(rows, path: Path, bucket_s: int) -> str:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for k, (task, (minutes, rates)) in enumerate(sorted(_series(rows, 0, 1, 3).items())):
        ax.plot(minutes, rates, label=task, **curve_style(k))
        if task in TARGETS:
            ax.axhline(TARGETS[task], ls=":", lw=0.8, color=ax.lines[-1].get_color())
    measure = curve_measure(rows)
    ax.set(xlabel="minutes since start", ylabel=f"{measure} ({bucket_s} s buckets)", title="Learning curve")
    if measure == "success":  # a normalised score may leave [0, 1]
        ax.set_ylim(-0.02, 1.02)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the axes: inside, it hid curves
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_game_scores(rows, path: Path, bucket_s: int) -> str:
    """Normalised score per game over minutes since start (rows: game, minute, episodes, mean
    score, mean normalised score); the random policy is 0, the scripted heuristic 1."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for k, (game, (minutes, scores)) in enumerate(sorted(_series(rows, 0, 1, 4).items())):
        ax.plot(minutes, scores, label=game, **curve_style(k))
    for level, what in ((0.0, "random"), (1.0, "heuristic")):
        ax.axhline(level, ls=":", lw=0.8, color="grey")
        ax.text(0.01, level, what, transform=ax.get_yaxis_transform(), fontsize=7, color="grey", va="bottom")
    ax.set(xlabel="minutes since start", ylabel=f"normalised score ({bucket_s} s buckets)",
           title="Games: normalised score")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the axes: inside, it hid a level's label
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_by_version(rows, path: Path) -> str:
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(11, 3.3))
    for a, column in ((a1, 3), (a2, 4), (a3, 5)):  # success, mean reward, steps per episode
        for k, (task, (vs, ys)) in enumerate(sorted(_series(rows, 0, 1, column).items())):
            a.plot(vs, ys, label=task, **curve_style(k))
    a1.set(xlabel="policy version", ylabel="success rate", ylim=(-0.02, 1.02), title="Success by version")
    a2.set(xlabel="policy version", ylabel="mean reward", title="Reward by version")
    a3.set(xlabel="policy version", ylabel="steps / episode", title="Steps per episode")
    for a in (a1, a2, a3):
        a.grid(alpha=0.3)
    a1.legend()
    return _save(fig, path)


def plot_throughput(rows, path: Path, bucket_s: int) -> str:
    fig, ax = plt.subplots(figsize=(7, 3))
    ts = [r[0] for r in rows]  # minutes since start
    ax.plot(ts, [r[1] / bucket_s for r in rows], label="env steps/s")
    ax.plot(ts, [r[2] / bucket_s for r in rows], label="episodes/s")
    ax.set(xlabel="minutes since start", ylabel="per second", title="Rollout throughput")
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, path)


SUITE_TARGETS = (0.8, 0.9)  # the main job's: a suite mean of 0.8 within 60 minutes, 0.9 within 30


def suite_mean_reached(rows, target: float, window: int = 100) -> float | None:
    """Seconds after the start at which the suite mean first reached ``target`` with every task
    of the run counted over a full ``window`` of episodes (rows: at_s, suite_mean, tasks,
    fewest_episodes; a mean over a task's first few episodes is noise); None if never."""
    every = max((r[2] for r in rows), default=0)
    return next((float(r[0]) for r in rows if r[2] == every and r[3] >= window and r[1] >= target), None)


def plot_suite_mean(rows, path: Path) -> str:
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot([r[0] / 60 for r in rows], [r[1] for r in rows], marker=".", label="mean over tasks of last-100 success")
    for target in SUITE_TARGETS:
        ax.axhline(target, ls=":", lw=0.8, color="grey")
    ax.set(xlabel="minutes since start", ylabel="suite mean", ylim=(-0.02, 1.02), title="Suite mean over time")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_staleness(rows, path: Path) -> str:
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar([r[0] for r in rows], [r[1] for r in rows], label="trajectories")
    ax.bar([r[0] for r in rows], [r[2] for r in rows], label="RL-eligible", alpha=0.7)
    ax.set(xlabel="staleness (versions behind the trainer)", ylabel="trajectories", title="Staleness")
    ax.legend()
    return _save(fig, path)


# the trainer's curves, by update: the policy's entropy over the run beside the entropy band's
# coefficient and self-imitation's figures (those a run recorded)
TRAINER_PANELS = [M.REWARD_MEAN, M.ENTROPY, M.ENT_COEF, M.CLIP_FRAC, M.EXPLAINED_VARIANCE, M.REWARD_CORR,
                  M.SIL_LOSS, M.SIL_ADVANTAGE, M.SIL_REPLAY_STEPS, M.UPDATE_TIME_S, M.IDLE_FRACTION,
                  M.STALENESS_MEAN, M.STALE_DROPPED_TOTAL]


def trainer_panels(rows) -> list[str]:
    """The metrics ``plot_trainer`` draws: those of ``TRAINER_PANELS`` the updates recorded (the
    entropy's among them), else the first nine names they hold."""
    present = [k for k in TRAINER_PANELS if any(k in (r[3] or {}) for r in rows)]
    return present or sorted({k for r in rows for k in (r[3] or {})})[:9]


def plot_trainer(rows, path: Path) -> str | None:
    if not rows:
        return None
    # a run recorded before the metric groups: its names read as today's
    rows = [(*r[:3], {M.current(k): v for k, v in (r[3] or {}).items()}) for r in rows]
    present = trainer_panels(rows)
    n = len(present)
    cols = 3
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(11, 2.6 * ((n + cols - 1) // cols)), squeeze=False)
    for ax, key in zip(axes.flat, present):
        pts = [(r[0], r[3][key]) for r in rows if key in (r[3] or {})]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".")
        ax.set(title=key, xlabel="update")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return _save(fig, path)


def as_minutes(cols: list[str], rows: list[tuple], col: int) -> tuple[list[str], list[tuple]]:
    """The table with column ``col`` (seconds since the start) shown as minutes since the start."""
    named = [*cols[:col], "minute", *cols[col + 1:]]
    return named, [(*r[:col], round(r[col] / 60, 2), *r[col + 1:]) for r in rows]


def _md_table(cols, rows) -> str:
    return render(cols, rows, "table")


def write_report(settings: Settings, run: RunInfo, out_dir: Path, extra_sections: list[str] | None = None,
                 extra_summary: dict[str, Any] | None = None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    p = run.policy
    t0 = run.started_at
    sections: list[str] = []

    taught = taught_line(run.config)

    def figure(title: str, sql: str, plot=None, *args, seconds_col: int | None = None,
               result: tuple[list[str], list[tuple]] | None = None, learning: bool = False) -> tuple[list[str], list[tuple]]:
        """A section of ``sql``'s table and plot; ``result`` is its answer when the caller already
        has it; a ``learning`` figure names what taught the policy."""
        cols, rows = result if result is not None else query(settings, sql)
        block = [f"## {title}", "", *([taught, ""] if learning and taught else [])]
        if plot and rows:
            name = plot(rows, *args)
            if name:
                block += [f"![{title}]({name})", ""]
        shown_cols, shown = (cols, rows) if seconds_col is None else as_minutes(cols, rows, seconds_col)
        block += ["```", _md_table(shown_cols, shown) if rows else "(no rows)", "```", "",
                  "<details><summary>SQL</summary>", "", "```sql", sql, "```", "</details>", ""]
        sections.append("\n".join(block))
        return cols, rows

    before_sql, after_sql = Q.first_n_success(p), Q.last_n_success(p)
    _, before = query(settings, before_sql)
    _, after = query(settings, after_sql)
    # a game's figure is its mean normalised score (its success is reaching the heuristic's mean)
    scores_sql = (Q.last_n_scores(p, first=True), Q.last_n_scores(p))
    scored_before, scored_after = ({r[0]: r for r in query(settings, sql)[1]} for sql in scores_sql)
    before = [scored_before.get(r[0], r) for r in before]
    after = [scored_after.get(r[0], r) for r in after]
    before_map = {r[0]: r for r in before}
    lines = ["| task | target | before: first 100 | after: last 100 | episodes in window | time to target |",
             "|---|---|---|---|---|---|"]
    reached: dict[str, float] = {}
    for task, n, rate in after:
        target = TARGETS.get(task)
        ttt = "-"
        if target is not None:
            _, r = query(settings, Q.first_success_time(p, task, target))
            secs = r[0][0] if r else -1
            if secs is not None and secs >= 0:
                reached[task] = float(secs)
                ttt = f"{secs / 60:.1f} min"
            else:
                ttt = "not reached"
        b = before_map.get(task)
        lines.append(f"| {task} | {target if target is not None else '-'} | "
                     f"{b[2] if b else '-'} | {rate} | {n} | {ttt} |")
    few = sorted(task for task, n, _ in after if n < 100)
    if few:
        lines += ["", f"{', '.join(few)}: fewer than 100 ended episodes, so before and after are the same episodes; "
                      "compare the phases (below) instead."]
    summary = "\n".join(lines)

    bucket_s = bucket_seconds(run.ended_at - run.started_at)
    curve_sql = Q.success_over_time(p, bucket_s, t0)
    curve = query(settings, curve_sql)
    figure(f"Learning curve: {curve_measure(curve[1])} over wall-clock", curve_sql,
           plot_learning_curve, out_dir / "learning_curve.png", bucket_s, result=curve, learning=True)
    games_sql = Q.game_scores_over_time(p, bucket_s, t0)
    games = query(settings, games_sql)
    if games[1]:  # a run with games
        figure("Games: normalised score over wall-clock", games_sql,
               plot_game_scores, out_dir / "game_scores.png", bucket_s, result=games, learning=True)
    points = max(1, int((run.ended_at - run.started_at) // bucket_s))
    _, suite_rows = figure("Suite mean over time: each task's last 100 episodes as of that moment",
                           Q.suite_mean_over_time(p, t0, bucket_s, points), plot_suite_mean, out_dir / "suite_mean.png",
                           seconds_col=0, learning=True)
    reached_suite = {t: suite_mean_reached(suite_rows, t) for t in SUITE_TARGETS}
    sections[-1] += "\n" + "\n".join(
        f"Suite mean {t}: " + (f"first reached at {s / 60:.1f} min (every task over a full 100 episodes)"
                               if s is not None else "not reached with every task over a full 100 episodes")
        for t, s in reached_suite.items()) + "\n"
    figure("Success, reward and steps by policy version", Q.success_by_version(p),
           plot_by_version, out_dir / "by_version.png", learning=True)
    figure("Rollout throughput", Q.throughput(p, bucket_s, t0), plot_throughput, out_dir / "throughput.png", bucket_s)
    figure("Step latency: where a step's wall-clock went (ms)", Q.step_latency(p))
    figure("Step cost per task: the environment's latency on each task (ms)", Q.step_cost_by_task(p))
    figure("Staleness of trained trajectories", Q.staleness(p), plot_staleness, out_dir / "staleness.png")
    cols, rows = query(settings, Q.trainer_metrics(p))
    name = plot_trainer(rows, out_dir / "trainer.png")
    sections.append("\n".join(["## Trainer metrics", "", f"![trainer]({name})" if name else "(no updates)", "",
                               f"{len(rows)} updates. Last: `{json.dumps(rows[-1][3]) if rows else '{}'}`", "",
                               "<details><summary>SQL</summary>", "", "```sql", Q.trainer_metrics(p), "```",
                               "</details>", ""]))
    figure("Episodes per task, and how they ended (done, out of steps, out of time)", Q.totals(p))

    minutes = (run.ended_at - run.started_at) / 60
    head = [
        f"# Flywheel demo report — run {run.run_id}", "",
        f"Mode **{run.mode}**, policy `{p}`, {minutes:.1f} minutes of wall-clock.", "",
        *([taught, ""] if taught else []),
        "## Before and after", "",
        "Success rate of the sampled (not greedy) policy over the first and the last 100 ended "
        "episodes of each task (a game's: its mean normalised score, 0 = the random policy, 1 = the "
        "heuristic), computed in ClickHouse:", "",
        summary, "",
        "<details><summary>SQL</summary>", "", "```sql", before_sql, "", after_sql, "", scores_sql[0], "", scores_sql[1], "```",
        "</details>", "",
    ]
    if run.notes:
        head += ["## Notes", ""] + [f"- {n}" for n in run.notes] + [""]
    tail = ["## Configuration", "", "```json", json.dumps(run.config, indent=2, default=str), "```", ""]
    path = out_dir / "report.md"
    path.write_text("\n".join(head + (extra_sections or []) + sections + tail))
    (out_dir / "summary.json").write_text(json.dumps({
        "run_id": run.run_id, "mode": run.mode, "policy": p, "minutes": minutes,
        "after": {t: r for t, _, r in after}, "before": {t: r[2] for t, r in before_map.items()},
        "seconds_to_target": reached, "taught_by": run.config.get("taught_by"),
        "suite_mean_seconds_to": {str(t): s for t, s in reached_suite.items()}, **(extra_summary or {}),
        "notes": run.notes,  # how the run ended where not at its --minutes ("stopped by Ctrl-C", ...)
    }, indent=2, default=str))
    return path
