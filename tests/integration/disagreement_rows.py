"""A log where a learned verifier and the page disagree, written as the sink writes it: episodes
assembled by the streams' own code, scored by the real Scorer with a verifier deciding every task
(``--judge-tasks '*'``), their trajectories, steps and scored rows inserted with the sink's row
mapping into chDB. Shared by the Disagreements view's integration and browser tests."""

from __future__ import annotations

from consumers.rows import COLUMNS, row_for
from infra.clickhouse.client import make_client
from streams.assemble import add_event
from streams.score import make_scorer
from tests.fakes.steps import episode_events

JUDGED_RUN = "pixel-ppo"  # the fake episodes' policy
PAGE_RUN = "pixel-page"  # a run scored by the page alone: no verifier decided anything
# episode id: (task, the page's verdict, the verifier's score); the verifier's threshold is 0.5
EPISODES = {
    "a-tp": ("click-a", True, 0.9),
    "a-fp": ("click-a", False, 0.8),  # the verifier's success on a page failure: reward hacking to look for
    "a-tn": ("click-a", False, 0.1),
    "b-fn": ("click-b", True, 0.2),
    "b-fp": ("click-b", False, 0.95),
    "b-tp": ("click-b", True, 0.7),
}
FALSE_POSITIVES = {"a-fp", "b-fp"}
FALSE_NEGATIVES = {"b-fn"}


class ByEpisode:
    """A verifier whose score per episode is given (the judge interface of streams.judge)."""

    def judge(self, traj) -> float:
        return EPISODES[traj.episode_id][2]


def trajectory(episode_id: str, task: str, success: bool, policy: str = JUDGED_RUN):
    state, traj = None, None
    for ev in episode_events(episode_id, 2, success=success):
        if ev.kind == "started":
            ev = ev.model_copy(update={"task": ev.task.model_copy(update={"name": task}), "policy": policy})
        state, out = add_event(state, ev, 200.0)
        traj = out or traj
    return traj


def write_log(settings) -> None:
    """The judged run's episodes scored with the verifier deciding (and once more by the page's
    scorer, as a `flywheel rescore` would add: no verifier there), the page-only run's by the page."""
    judged = make_scorer("rule-v1", ByEpisode(), frozenset({"*"}), judge_success_at=0.5)
    page = make_scorer("strict-v1")
    rows: list[tuple[str, object]] = []
    for episode_id, (task, success, _score) in EPISODES.items():
        traj = trajectory(episode_id, task, success)
        rows += [("trajectories", traj), ("scored", judged.score(traj, 300.0)), ("scored", page.score(traj, 301.0))]
        rows += [("steps", s) for s in traj.steps]
        other = trajectory(f"page-{episode_id}", task, success, PAGE_RUN)
        rows += [("trajectories", other), ("scored", page.score(other, 300.0))]
    client = make_client(settings)
    try:
        for kind, event in rows:
            table, values = row_for(kind, event)
            client.insert(table, [values], column_names=COLUMNS[table])
    finally:
        client.close()
