"""The few-demonstrations experiment's plan and table (app.few_demos)."""

from __future__ import annotations

from pathlib import Path

from app.few_demos import Cell, cells, demo_argv, record_argv, result_row, table, task_success

TASKS = ["click-tab-2", "email-inbox-delete"]


def test_cells_are_seed_major_and_each_has_its_own_topics_annotator_and_task_seeds():
    plan = cells([0, 3, 10], [0, 1])
    assert [(c.n, c.seed) for c in plan] == [(0, 0), (3, 0), (10, 0), (0, 1), (3, 1), (10, 1)]
    assert len({c.platform_prefix("x") for c in plan}) == len(plan)
    assert Cell(3, 0).annotator() != Cell(10, 0).annotator()
    assert Cell(3, 1).first_task_seed() != Cell(3, 0).first_task_seed()


def test_the_commands_clone_the_recorded_demonstrations_only_when_there_are_some():
    rec = record_argv("py", Cell(3, 1), TASKS)
    assert rec[:3] == ["py", "-m", "app.ui.record"]
    assert rec[rec.index("--tasks") + 1] == "click-tab-2,email-inbox-delete" and rec[rec.index("--n") + 1] == "3"
    assert rec[rec.index("--annotator") + 1] == Cell(3, 1).annotator()
    with_demos = demo_argv("py", Cell(3, 1), TASKS, 20, Path("r"), extra=["--x", "1"])
    assert with_demos[:4] == ["py", "-m", "app.cli", "demo"] and "--demos-from" in with_demos
    assert with_demos[with_demos.index("--minutes") + 1] == "20" and with_demos[-2:] == ["--x", "1"]
    assert with_demos[with_demos.index("--seed") + 1] == "1"
    from app import demo_cli  # the demo's own parser reads the pinned rounds
    from app.demo_config import DemoConfig
    from infra.runtime.command import parse_command
    from infra.runtime.config import resolve

    cfg = resolve(DemoConfig, parse_command(demo_cli.register, "demo", with_demos[4:-2]))
    assert (cfg.rft_every, cfg.trainer_args) == (4, "--rft-epochs 2 --epochs 8")  # seeds 0-2's rounds and epochs
    from_random = demo_argv("py", Cell(0, 1), TASKS, 20, Path("r"))
    assert "--demos-from" not in from_random and "--cold-start-demos" not in from_random  # the demo's own settings


def test_a_guide_cell_runs_n0s_recipe_with_the_floor_guided_by_its_demonstrations_and_clones_none():
    from app import demo_cli
    from app.demo_config import DemoConfig, effective
    from infra.runtime.command import parse_command
    from infra.runtime.config import resolve

    guided = demo_argv("py", Cell(3, 1), TASKS, 20, Path("r"), use="guide")
    assert "--demos-from" not in guided and "--rft-every" not in guided
    cfg = resolve(DemoConfig, parse_command(demo_cli.register, "demo", guided[4:]))
    assert cfg.explore_from == "human" and cfg.demos_from == "scripted"
    cfg, cold, _ = effective(cfg, frozenset())  # no task of theirs has a scripted demonstrator: random weights
    assert not cold.per_task and cfg.explore == 0.5  # N = 0's floor, now guided
    assert "--explore-from" not in demo_argv("py", Cell(0, 1), TASKS, 20, Path("r"), use="guide")
    import pytest

    with pytest.raises(ValueError, match="use"):
        demo_argv("py", Cell(3, 1), TASKS, 20, Path("r"), use="both")
    assert "guide the exploration floor" in table([], TASKS, 20, "guide")[0]


def test_the_table_has_a_row_per_n_with_mean_and_spread_over_seeds():
    def row(n, seed, a, b, recorded=None):
        return result_row(Cell(n, seed), TASKS, {"run_id": f"r{n}{seed}", "after": {"click-tab-2": a,
                                                                                     "email-inbox-delete": b}},
                          recorded)
    got = {"click-tab-2": {"recorded": 3, "success": 3}, "email-inbox-delete": {"recorded": 3, "success": 2}}
    results = [row(0, 0, 0.1, 0.0), row(0, 1, 0.3, 0.2), row(3, 0, 0.9, 0.8, got)]
    md = table(results, TASKS, 20)
    assert any("N demonstrations recorded through the UI" in line for line in md)
    rows = [line for line in md if line.startswith("| 0 ") or line.startswith("| 3 ")]
    assert rows[0].startswith("| 0 | 2 | 0.2 ± 0.14 | 0.1 ± 0.14 | 0.15 ± 0.14 | - |")
    assert rows[1] == "| 3 | 1 | 0.9 | 0.8 | 0.85 | 5 of 6 |"


def test_a_task_the_run_never_ended_is_none_not_zero():
    assert task_success({"after": {"click-tab-2": 0.5}}, TASKS) == {"click-tab-2": 0.5, "email-inbox-delete": None}
