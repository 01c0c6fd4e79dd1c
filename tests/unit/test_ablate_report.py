"""app.ablation.runs (python -m benchmarks.ablate): a table grown over several invocations keeps every run once."""

from __future__ import annotations

import argparse
import sys

import pytest

from app.ablation import runs as ablate


SETTINGS = {"tasks": "default", "minutes": 7.0, "target": 0.8, "demo_args": "", "recipe": ablate.RECIPE}


def _row(config: str, seed: int, success: float) -> dict:
    return {"config": config, "seed": seed, "final_success": success, "recipe": ablate.RECIPE}


def test_kept_rows_fill_only_the_runs_this_invocation_lacks():
    kept = [_row("full", 0, 0.6), _row("full", 1, 0.61), _row("sync", 0, 0.5)]
    fresh = [_row("full", 1, 0.7), _row("full", 2, 0.65)]
    merged = ablate.merge_kept(fresh, kept, ["full", "sync"], SETTINGS)
    assert [(r["config"], r["seed"]) for r in merged] == [("full", 0), ("full", 1), ("full", 2), ("sync", 0)]
    by_key = {(r["config"], r["seed"]): r for r in merged}
    assert by_key[("full", 1)]["final_success"] == 0.7 and "kept" not in by_key[("full", 1)]  # re-measured wins
    assert by_key[("full", 0)]["kept"] and by_key[("sync", 0)]["kept"]


def test_kept_rows_of_other_settings_or_other_configurations_are_not_mixed_in():
    kept = [{**_row("full", 0, 0.6), **SETTINGS, "minutes": 30.0}]
    with pytest.raises(ValueError, match="minutes"):
        ablate.merge_kept([], kept, ["full"], SETTINGS)
    old = {"config": "full", "seed": 0, "final_success": 0.6}  # a table from before the recipe was recorded
    with pytest.raises(ValueError, match="recipe"):
        ablate.merge_kept([], [old], ["full"], SETTINGS)
    kept = [_row("sync", 0, 0.5), _row("renamed-config", 0, 0.1)]
    assert ablate.merge_kept([], kept, ["full"], SETTINGS) == []  # outside --configs: left out, no error


def test_games_are_measured_by_normalised_score_and_runs_of_another_measure_are_not_mixed_in():
    assert ablate.default_measure("games") == ablate.default_measure("games.snake,games.2048") == "normalised_score"
    assert ablate.default_measure("default") == ablate.default_measure("games.snake,click-test") == "success"
    assert "avg(m), 4) AS normalised_score" in ablate.curve_sql("p", "normalised_score")
    assert "toFloat64(success) AS m" in ablate.curve_sql("p") and "AS success_rate" in ablate.curve_sql("p")
    kept = [{**_row("full", 0, 0.4), **SETTINGS, "measure": "success"}]
    with pytest.raises(ValueError, match="measure"):
        ablate.merge_kept([], kept, ["full"], {**SETTINGS, "measure": "normalised_score"})


def test_a_games_recipe_names_the_demonstrations_noise_the_scoring_version_and_dagger():
    from producers.suites import setting
    from streams.score import SCORING_VERSION

    assert ablate.recipe("default") == ablate.RECIPE
    assert ablate.recipe("starter") == ablate.RECIPE
    games = ablate.recipe("games")
    assert setting(['games.2048', 'games.mines', 'games.snake'], "demo_noise") == 0.2
    # teacher-free RL (issue 56): no DAgger, no expert term, no RFT rounds re-cloning the demonstrations
    assert games == f"curriculum+rft0+noise0.2+scoring{SCORING_VERSION}+dagger0+expert0+lastkey+sharedlabels+hidden256"
    assert ablate.recipe("games.snake") != ablate.RECIPE
    # a games table measured before the noise and scoring 1.4 (recipe "curriculum+rft4") is not kept
    old = {**_row("full", 1, 0.03), **SETTINGS, "tasks": "games"}
    with pytest.raises(ValueError, match="recipe"):
        ablate.merge_kept([], [old], ["full"], {**SETTINGS, "tasks": "games", "recipe": games})


def test_a_run_is_measured_under_the_recipe_it_recorded(tmp_path):
    run = tmp_path / "runs" / "abl-x-full-s0"
    run.mkdir(parents=True)
    assert ablate.recipe_of(run) == ablate.UNRECORDED != ablate.RECIPE  # from before runs recorded it: RFT every 4
    (run / ablate.RECIPE_FILE).write_text(ablate.recipe("games") + "\n")
    assert ablate.recipe_of(run) == ablate.recipe("games")
    assert ablate.recipe("games , games.snake") == ablate.recipe("games")  # --tasks read as the demo reads it


def test_no_rft_is_left_out_where_the_recipe_has_no_rft_rounds():
    assert "no-rft" in ablate.default_configs("default") and "no-rft" in ablate.default_configs("starter")
    games = ablate.default_configs("games")
    assert "no-rft" not in games and "full" in games and "no-value-pretrain" in games


def test_a_stop_file_ends_the_invocation_after_the_running_run_and_is_removed(tmp_path, capsys):
    order = ablate.runs_in_order([0, 1], ["full", "sync"], tmp_path)
    assert next(order) == (0, "full") and next(order) == (0, "sync")
    (tmp_path / ablate.STOP_AFTER).touch()  # while (0, "sync") runs
    assert list(order) == []
    assert not (tmp_path / ablate.STOP_AFTER).exists()  # the next invocation runs
    assert "no further run" in capsys.readouterr().out
    assert list(ablate.runs_in_order([0, 1], ["full"], tmp_path)) == [(0, "full"), (1, "full")]


def test_the_starting_version_is_the_summarys_or_the_first_published(monkeypatch):
    asked = []

    def sql(statement):
        asked.append(statement)
        return [{"v": 2, "n": 5}] if "'pixel-old'" in statement else [{"v": 0, "n": 0}]

    monkeypatch.setattr(ablate, "sql", sql)
    assert ablate.base_version_of("pixel-new", {"base_version": 3}) == 3 and not asked
    assert ablate.base_version_of("pixel-old", {"phases": []}) == 2  # a run from before the summary recorded it
    assert "policy_versions" in asked[-1]
    assert ablate.base_version_of("pixel-none", {}) is None  # nothing published: no starting version


def test_a_tag_that_would_give_run_ids_the_demo_refuses_is_refused_before_anything_runs(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["ablate.py", "--tag", "a/b", "--report-only", "--out", "/nonexistent/x"])
    with pytest.raises(SystemExit):
        ablate.main()
    assert "would give run ids the demo refuses" in capsys.readouterr().err


def test_per_task_rows_become_one_curve_per_task_and_a_panel_each(tmp_path):
    rows = [{"task": "games.snake", "window": 0, "episodes": 10, "normalised_score": 0.2, "seconds": 60.0},
            {"task": "games.2048", "window": 0, "episodes": 10, "normalised_score": 0.5, "seconds": 90.0},
            {"task": "games.snake", "window": 1, "episodes": 20, "normalised_score": 0.4, "seconds": 120.0}]
    curves = ablate.task_curves(rows)
    assert list(curves) == ["games.snake", "games.2048"]
    assert [c["normalised_score"] for c in curves["games.snake"]] == [0.2, 0.4] and "task" not in curves["games.snake"][0]
    results = [{"config": "full", "seed": 0, "curve": [], "task_curves": curves},
               {"config": "coupled-gae", "seed": 0, "curve": [], "task_curves": {"games.snake": curves["games.snake"]}}]
    drawn = ablate.plot_by_task(results, tmp_path / "t.png", "normalised_score", 10, list(ablate.CONFIGS))
    assert drawn == ["games.2048", "games.snake"] and (tmp_path / "t.png").stat().st_size > 1000
    kept = [{"config": "full", "seed": 0, "curve": []}]  # a row measured before per-task curves were: no figure
    assert ablate.plot_by_task(kept, tmp_path / "t.png", "success", 10, list(ablate.CONFIGS)) == []
    assert not (tmp_path / "t.png").exists()  # and none left from an earlier report


def test_the_report_shows_the_per_task_figure_only_when_it_was_drawn(tmp_path):
    args = argparse.Namespace(tasks="games", minutes=30.0, target=0.8, measure="normalised_score")
    row = {"config": "full", "seed": 0, "curve": [{"episodes": 100, "normalised_score": 0.3, "seconds": 600.0}],
           "episodes": 100, "final_success": 0.3, "mean_task_success_last_100": 0.3, "seconds_to_target": None,
           "ev_at_ppo_start": 0.5, "corr_at_ppo_start": 0.9, "entropy_last": 1.0}
    with_tasks = {**row, "task_curves": {"games.snake": [{"episodes": 10, "normalised_score": 0.3, "seconds": 60.0}]},
                  "task_window": ablate.TASK_WINDOW}
    other_window = {**with_tasks, "seed": 1, "task_window": ablate.TASK_WINDOW + 5}
    text = ablate.write_report([with_tasks, other_window], tmp_path, args).read_text()
    assert "ablations_by_task.png" in text and (tmp_path / "ablations_by_task.png").exists()
    assert "one line for each of 1 runs (1 measured without them, or with other windows, are not drawn)" in text
    text = ablate.write_report([row, other_window], tmp_path, args).read_text()  # e.g. every row kept from before
    assert "ablations_by_task.png" not in text and not (tmp_path / "ablations_by_task.png").exists()


def test_a_tasks_last_episodes_at_an_update_take_whole_updates_down_and_a_share_of_the_one_crossing():
    from app.measures import by_update, last_at_update
    rows = [("snake", 3, 50, 25.0), ("snake", 1, 80, 0.0), ("snake", 2, 40, 40.0), ("2048", 1, 5, 1.0)]
    buckets = by_update(rows)
    assert buckets == {"2048": [[1, 5, 1.0]], "snake": [[1, 80, 0.0], [2, 40, 40.0], [3, 50, 25.0]]}
    # snake at update 3: 50 at 0.5 and 40 at 1.0, then 10 of update 1's 80 at 0.0 -> 65 / 100; 2048: its 5 at 0.2
    assert last_at_update(buckets, 3) == pytest.approx((0.65 + 0.2) / 2)
    # at update 2 update 3 is left out: 40 at 1.0 and 60 of update 1's at 0.0 -> 0.4
    assert last_at_update(buckets, 2, last=100) == pytest.approx((0.4 + 0.2) / 2)
    assert last_at_update(buckets, 0) is None  # no PPO episode of a task up to update 0


def test_the_runs_are_read_at_the_fewest_updates_any_reached(tmp_path):
    fast = {"config": "full", "seed": 0, "updates": 4, "by_update": {"t": [[1, 100, 0.0], [4, 100, 100.0]]}}
    slow = {"config": "coupled-gae", "seed": 0, "updates": 2, "by_update": {"t": [[1, 50, 0.0], [2, 100, 50.0]]}}
    old = {"config": "fixed-lambda", "seed": 0}  # measured before the per-update figures
    assert ablate.at_equal_updates([fast, slow, old]) == 2
    assert fast["mean_last_100_at_update"] == 0.0  # its update-4 episodes are after update 2
    assert slow["mean_last_100_at_update"] == 0.5 and old["mean_last_100_at_update"] is None
    assert ablate.at_equal_updates([{"config": "full", "seed": 0}]) is None
    args = argparse.Namespace(tasks="games", minutes=30.0, target=0.8, measure="normalised_score")
    base = {"curve": [], "episodes": 0, "final_success": None, "mean_task_success_last_100": None,
            "seconds_to_target": None, "ev_at_ppo_start": None, "corr_at_ppo_start": None, "entropy_last": None}
    text = ablate.write_report([{**base, **fast}, {**base, **slow}], tmp_path, args).read_text()
    assert "versions up to update 2, the fewest any run here reached" in text and "policy_version_max" in text
    assert "| full | `` | 1 | 0 | - | - | - | 0 | 4 |" in text and "pi_sft's left out" in text


def test_kept_rows_without_per_update_figures_are_read_from_clickhouse_by_their_recorded_policy(monkeypatch, capsys):
    asked = []

    def sql(statement):
        asked.append(statement)
        if "policy_versions" in statement:
            return [{"v": 1, "n": 3}] if "'pixel-abl-x2-full-s0'" in statement else [{"v": 0, "n": 0}]
        if "policy_version_max" in statement:
            return [{"task_name": "t", "updates": 1, "episodes": 10, "total": 5.0}]
        if "last 100" in statement:  # last_sql: (task, phase, episodes, score, steps, var)
            return [{"task_name": "t", "phase": "3 PPO, last 100", "episodes": 10, "s": 0.5, "m": 3.0, "v": 0.25}]
        return [{"task_name": "t", "phase": "2 pi_sft", "episodes": 20, "s": 0.25, "m": 3.0, "v": 0.2},
                {"task_name": "t", "phase": "3 PPO", "episodes": 10, "s": 0.5, "m": 3.0, "v": 0.25}]

    monkeypatch.setattr(ablate, "sql", sql)
    rows = [{"config": "full", "seed": 0, "policy": "pixel-abl-x2-full-s0", "ppo_gain_last_100": 0.3},
            {"config": "coupled-gae", "seed": 0},  # kept without its policy's name: nothing guessed
            {"config": "fixed-lambda", "seed": 0, "policy": "pixel-gone"},
            {"config": "no-value-pretrain", "seed": 0, "policy": "p' OR 1=1 --"}]
    ablate.backfill_updates(rows)
    assert rows[0]["by_update"] == {"t": [[1, 10, 5.0]]} and rows[0]["updates"] == 1
    assert rows[0]["mean_rl_last_100"] == 0.5 and rows[0]["ppo_gain_last_100"] == 0.3  # what it had is kept
    assert "'pixel-abl-x2-full-s0'" in asked[1] and "policy_version_max" in asked[1]
    assert rows[1] == {"config": "coupled-gae", "seed": 0} and rows[2].keys() == {"config", "seed", "policy"}
    assert "by_update" not in rows[3] and not any("OR 1=1" in a for a in asked)
    err = capsys.readouterr().err
    assert "coupled-gae seed 0: kept without its policy's name" in err
    assert "fixed-lambda seed 0: no PPO episode of pixel-gone" in err and "no-value-pretrain seed 0" in err


def test_the_figure_draws_each_run_against_ppo_updates_where_it_has_them(tmp_path):
    curve = [{"episodes": 100, "normalised_score": 0.3, "seconds": 600.0}]
    rows = [{"config": "full", "seed": 0, "curve": curve, "updates": 3, "by_update": {"t": [[1, 5, 1.0], [3, 5, 4.0]]}},
            {"config": "coupled-gae", "seed": 0, "curve": curve}]  # kept from before: no per-update curve
    ablate.plot(rows, tmp_path / "a.png", "normalised_score", 100, list(ablate.CONFIGS))
    assert (tmp_path / "a.png").stat().st_size > 1000
    from app.ablation.plot import update_curve
    two_tasks = {**rows[0], "by_update": {**rows[0]["by_update"], "u": [[2, 1, 0.0]]}}
    assert update_curve(two_tasks) == ([1, 2, 3], [None, pytest.approx(0.1), pytest.approx(0.25)])
    ablate.plot([two_tasks], tmp_path / "a.png", "normalised_score", 100, list(ablate.CONFIGS))  # None: not drawn
