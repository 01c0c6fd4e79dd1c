"""A short `flywheel demo` on one game, end to end: browser sandboxes on the games' page, Faust,
sink, trainer and hot reload, on games.2048 with 40-step episodes, until PPO published three
versions (`--until-version 3`; about a minute), with the last key in the policy's history strip
(`last_key`). What teaches it: reward alone. No demonstrations (random initial weights) and the
games suite's teacher-free RL (issue 56): DAgger's expert term and rounds left on auto, which is
off, so the heuristic labels nothing and the trainer imitates nothing.

It asserts what a user of the games suite should see: episodes whose steps' rewards add up to
the score the page showed, trajectories carrying the final and the normalised score, the trainer
training on them and publishing versions a rollout worker acted with, the report's
normalised-score figure per game and its "taught by" line, no teacher's label on any step, and
nothing on the dead-letter topic. The long runs are benchmarks (docs/tasks.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.e2e.test_demo import _delete_run_topics, _sql

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_games_demo_learns_on_scores(kafka_bootstrap, tmp_path):
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("Debian chromium is not installed (bash infra/run.sh installs it as root)")
    from infra.runtime.settings import load_settings

    env = {**os.environ, "FLYWHEEL_DATA_DIR": str(tmp_path), "FLYWHEEL_KAFKA_BOOTSTRAP": kafka_bootstrap}
    run_id = f"e2eg{uuid.uuid4().hex[:8]}"
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "demo", "--minutes", "3", "--run-id", run_id,
         "--tasks", "games.2048", "--max-steps", "40", "--cold-start-demos", "0", "--batch-episodes", "4",
         "--sandboxes", "2", "--episodes", "400", "--progress-s", "10",
         "--until-version", "3", "--policy-config", '{"last_key": true}'],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = tmp_path / "reports" / run_id / "report.md"
    text = report.read_text()
    assert "Games: normalised score over wall-clock" in text and (report.parent / "game_scores.png").exists()
    assert "Learning curve: normalised score over wall-clock" in text
    # reward alone: no demonstration, no teacher (from random weights the demo adds self-imitation of
    # the policy's own best episodes, which the sentence names in brackets)
    assert "Taught by: reward alone (self-imitation" in text and "demonstrations" not in text.split("Taught by:")[1].split("\n")[0]
    summary = json.loads((report.parent / "summary.json").read_text())
    assert "PPO" in [p["phase"] for p in summary["phases"]], summary["phases"]

    policy = f"pixel-{run_id}"
    row = _sql(env, f"""SELECT
        (SELECT count() FROM trajectories FINAL WHERE policy = '{policy}' AND status = 'ended') AS ended,
        (SELECT countIf(normalised_score IS NULL OR score IS NULL) FROM trajectories FINAL
            WHERE policy = '{policy}' AND status = 'ended') AS unscored,
        (SELECT max(num_steps) FROM trajectories FINAL WHERE policy = '{policy}') AS longest,
        (SELECT max(version) FROM policy_versions FINAL WHERE policy = '{policy}') AS published,
        (SELECT max(policy_version) FROM steps FINAL WHERE policy = '{policy}') AS acted,
        (SELECT count() FROM dead_letters FINAL) AS dead,
        (SELECT count() FROM v_game_scores WHERE policy = '{policy}' AND game = 'games.2048') AS curve,
        (SELECT count() FROM steps FINAL WHERE policy = '{policy}') AS steps,
        (SELECT countIf(expert_action != '') FROM steps FINAL WHERE policy = '{policy}') AS labelled,
        (SELECT countIf(mapContains(metrics, 'losses/expert_loss') OR mapContains(metrics, 'losses/dagger_loss'))
            FROM trainer_metrics FINAL WHERE policy = '{policy}') AS imitating,
        (SELECT any(config) FROM policy_versions FINAL WHERE policy = '{policy}') AS config""")[0]
    print(row)
    assert row["ended"] >= 4 and row["unscored"] == 0, "every ended game episode carries its scores"
    assert row["longest"] == 40, "2048 at random lasts beyond 40 steps: the step budget ends the episode"
    assert row["published"] >= 1 and row["acted"] >= 1, "PPO published a version the rollout worker acted with"
    assert row["dead"] == 0
    assert row["curve"] >= 1, "the analytics view has the game's score curve"
    # teacher-free: the heuristic labelled none of the policy's steps and the trainer imitated nothing
    assert row["steps"] > 0 and row["labelled"] == 0, "no teacher's label on a step of the games' default RL"
    assert row["imitating"] == 0, "no update reported an expert or DAgger loss"
    assert json.loads(row["config"])["last_key"] is True
    # a step's reward is the change of the page's score: an episode's rewards add up to its final score
    sums = _sql(env, f"""SELECT t.episode_id, any(t.score) AS score, sum(s.reward) AS rewards
        FROM (SELECT episode_id, score FROM trajectories FINAL WHERE policy = '{policy}' AND status = 'ended') AS t
        INNER JOIN (SELECT episode_id, reward FROM steps FINAL WHERE policy = '{policy}') AS s
        ON t.episode_id = s.episode_id GROUP BY t.episode_id""")
    assert sums and all(abs(r["score"] - r["rewards"]) < 1e-6 for r in sums), sums[:5]
    _delete_run_topics(load_settings({"kafka_bootstrap": kafka_bootstrap, "topic_prefix": f"demo-{run_id}."}))
