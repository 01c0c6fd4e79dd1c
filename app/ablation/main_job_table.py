"""Issue 57's one benchmark in one table: per group of tasks, the floor (the least a step can be:
click + screenshot), bare sandboxes doing the main job's work, and the main job itself, with the
ratios between them. Pure: the SQL the main job's figures are read back with, the report's
machine-busy share, the per-group minutes and the table; ``python -m benchmarks.bench_main_job``
and ``python -m benchmarks.bench_main_job_groups`` measure. The logic lives here, in the package,
so the tests import it and no test imports a benchmark."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.demo_queries import q

GROUPS = ("default", "multistep", "games")  # the default suite, tasks outside it, the games
# the demo's minutes per group: the games' recipe clones the heuristics first and needs 30 to
# leave RL a window; a group not named here gets DEFAULT_MINUTES
MINUTES = {"default": 15.0, "multistep": 15.0, "games": 30.0}
DEFAULT_MINUTES = 15.0
# issue 57: the games played "about 12 episodes a minute over the three games"; target >= 5x the env steps/s
GAMES_EPISODES_PER_MINUTE_BEFORE = 12.0
GAMES_TARGET_X = 5.0


def rate_sql(policy: str, min_version: int) -> str:
    """Steps, seconds, steps/s and the env step's p50 (ms) of ``policy``'s acting from its first
    step of ``min_version`` on (1: the RL phase's window, as the runs' rows in ClickHouse give it)."""
    return (f"SELECT count() AS steps, dateDiff('millisecond', min(ts), max(ts)) / 1000 AS seconds, "
            f"steps / nullIf(seconds, 0) AS steps_per_s, quantile(0.5)(latency_env_ms) AS env_p50_ms "
            f"FROM steps FINAL WHERE policy = {q(policy)} AND policy_version >= {int(min_version)}")


def episode_sql(policy: str) -> str:
    """Mean steps per ended episode of ``policy``'s PPO phase (acting version >= 1)."""
    return (f"SELECT avg(num_steps) AS steps_per_episode FROM trajectories FINAL "
            f"WHERE policy = {q(policy)} AND status = 'ended' AND policy_version_max >= 1")


def rl_episodes_sql(policy: str) -> str:
    """Episodes ``policy`` played wholly in its RL phase (every step at version >= 1) and ended,
    the seconds from the first one's start to the last one's end, and episodes per minute."""
    return (f"SELECT count() AS episodes, dateDiff('millisecond', min(started_at), max(ended_at)) / 1000 AS seconds, "
            f"episodes * 60 / nullIf(seconds, 0) AS per_minute FROM trajectories FINAL "
            f"WHERE policy = {q(policy)} AND status = 'ended' AND policy_version_min >= 1")


_ALL_ROW = re.compile(r"^\|\s*all\s*\|[^|]*\|[^|]*\|\s*([0-9.]+)%\s*\|\s*$", re.MULTILINE)


def machine_busy(report_md: str) -> float | None:
    """The machine's busy share (0-1) from a demo report's "CPU by process" table (its ``all``
    row, every process of the run from RL's first task on); None if the report has none."""
    section = report_md.split("## CPU by process", 1)
    found = _ALL_ROW.search(section[1]) if len(section) == 2 else None
    return float(found.group(1)) / 100 if found else None


def group_minutes(spec: str, groups: list[str]) -> dict[str, float]:
    """``--minutes``: one number for every group, or ``group=minutes`` pairs over MINUTES'
    defaults (``games=20`` or ``default=10,games=30``). ValueError on a bad spec, a group not in
    ``groups`` or minutes <= 0."""
    out = {g: MINUTES.get(g, DEFAULT_MINUTES) for g in groups}
    spec = spec.strip()
    if not spec:
        return out
    if "=" not in spec:
        out = dict.fromkeys(groups, float(spec))
    else:
        for pair in spec.split(","):
            group, _, minutes = pair.partition("=")
            if group.strip() not in out:
                raise ValueError(f"--minutes names {group.strip()!r}, not one of the groups ({', '.join(groups)})")
            out[group.strip()] = float(minutes)
    if any(m <= 0 for m in out.values()):
        raise ValueError(f"minutes must be > 0, got {out}")
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None where either is missing or b is 0 (a figure that was not measured)."""
    return a / b if a is not None and b else None


@dataclass
class GroupFigures:
    """One group's row: steps/s of the floor (``sandboxes`` at once, and one page alone), of bare
    sandboxes doing the main job's work, and of the main job during RL."""

    group: str
    sandboxes: int
    floor: float | None = None
    floor_one_page: float | None = None
    bare: float | None = None  # a new task page every L steps, L the main job's episode length
    bare_every: int | None = None  # that L
    main: float | None = None
    env_p50_ms: float | None = None
    machine_busy: float | None = None
    episodes_per_minute: float | None = None
    note: str = ""  # why a figure is missing

    @property
    def main_over_floor(self) -> float | None:
        return ratio(self.main, self.floor)

    @property
    def main_over_bare(self) -> float | None:
        return ratio(self.main, self.bare)


def _f(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def markdown(rows: list[GroupFigures]) -> str:
    """The benchmark's table, with the issue's targets under it."""
    lines = ["| group | floor steps/s (N sandboxes) | floor steps/s (1 page) | bare steps/s (main job's work, new page every L) "
             "| main job steps/s in RL | main/floor | main/bare | env p50 (ms) | machine busy | episodes/min in RL |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bare = _f(r.bare, ".1f") + (f" (L={r.bare_every})" if r.bare_every else "")
        lines.append(f"| {r.group} | {_f(r.floor, '.1f')} (N={r.sandboxes}) | {_f(r.floor_one_page, '.1f')} | {bare} "
                     f"| {_f(r.main, '.1f')} | {_f(r.main_over_floor, '.2f')} | {_f(r.main_over_bare, '.2f')} "
                     f"| {_f(r.env_p50_ms, '.0f')} | {_f(r.machine_busy, '.0%')} | {_f(r.episodes_per_minute, '.1f')} |")
    notes = [f"- {r.group}: {r.note}" for r in rows if r.note]
    targets = ["", "Issue 57's targets: main/floor >= 0.5 (goal) with the machine >= 85% busy; the games "
               f">= {GAMES_TARGET_X:g}x today's env steps/s (today about {GAMES_EPISODES_PER_MINUTE_BEFORE:g} "
               f"episodes a minute over the three games: >= {GAMES_TARGET_X * GAMES_EPISODES_PER_MINUTE_BEFORE:g})."]
    return "\n".join(lines + targets + ([""] + notes if notes else [])) + "\n"
