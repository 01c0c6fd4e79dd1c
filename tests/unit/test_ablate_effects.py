"""app.ablation.effects (python -m benchmarks.ablate_effects): an ablation's effect is its difference from the full recipe with
Welch's standard error, marked when the difference is above twice that error."""

from __future__ import annotations

import json
import math

import pytest

from app.ablation import effects as ablate_effects


def test_the_difference_and_its_welch_standard_error():
    diff, se, n_base, n = ablate_effects.effect([0.5, 0.6, 0.7], [0.2, 0.3, 0.4, None])
    assert diff == pytest.approx(-0.3) and (n_base, n) == (3, 3)
    assert se == pytest.approx(math.sqrt(0.01 / 3 + 0.01 / 3))  # each side's sample variance is 0.01
    assert ablate_effects.above(diff, se)  # 0.3 > 2 * 0.0816
    assert ablate_effects.effect([0.5], [0.2, 0.3]) is None  # one seed of full: no spread to measure
    assert ablate_effects.effect([0.5, None], [0.2, 0.3]) is None
    assert ablate_effects.effect([0.5, float("nan")], [0.2, 0.3]) is None
    assert ablate_effects.effect([0.1, 0.1], [0.2, 0.2]) is None  # constant samples: nothing to compare with


def test_a_difference_inside_twice_its_standard_error_is_not_marked():
    diff, se, _, _ = ablate_effects.effect([0.2, 0.6, 0.4], [0.5, 0.3, 0.7])
    assert diff == pytest.approx(0.1) and not ablate_effects.above(diff, se)
    assert "(within 2 SE; n 3/3)" in ablate_effects.cell((diff, se, 3, 3))


def _row(config: str, seed: int, score, gain=0.1, ev=0.5) -> dict:
    return {"config": config, "seed": seed, "mean_rl_last_100": score, "ppo_gain": gain,
            "ev_at_ppo_start": ev}


def test_the_table_has_a_row_per_ablation_and_a_cell_per_measure():
    results = [_row("full", s, 0.5 + 0.1 * s, ev=0.4 + 0.1 * s) for s in range(3)]
    results += [_row("no-value-pretrain", s, 0.2 + 0.1 * s, ev=-5.0 - s, gain=None if s == 2 else 0.1 * s)
                for s in range(3)]
    results += [_row("coupled-gae", 0, 0.9)]
    lines = ablate_effects.effects_table(results)
    assert lines[0].count("|") == len(ablate_effects.MEASURES) + 3
    vp = next(line for line in lines if line.startswith("| no-value-pretrain |"))
    assert "| 3 | -0.300 ± 0.082 (> 2 SE; n 3/3)" in vp
    assert "(within 2 SE; n 2/3)" in vp  # the gain: one run without it, counted per cell
    assert "-6.500 ±" in vp  # the critic's EV at PPO start without pretraining
    gae = next(line for line in lines if line.startswith("| coupled-gae |"))
    assert gae.count("fewer than 2 values") == len(ablate_effects.MEASURES)
    before = [{("mean_task_success_last_100" if k == "mean_rl_last_100" else k): v for k, v in r.items()} for r in results]
    old = ablate_effects.effects_table(before)
    assert "| 3 | - (fewer than 2 values a side, or no spread) | -0.300 ± 0.082" in old[2]  # a table from before: its own column
    assert not any(line.startswith("| full |") for line in lines)


def test_no_table_without_the_full_recipe_or_without_an_ablation():
    assert ablate_effects.effects_table([_row("sync", 0, 0.5), _row("sync", 1, 0.6)]) == []
    assert ablate_effects.effects_table([_row("full", 0, 0.5), _row("full", 1, 0.6)]) == []


def test_the_command_prints_a_tables_effects_and_refuses_what_is_not_one(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps([_row("full", 0, 0.5, gain=0.1), _row("full", 1, 0.6, gain=0.2),
                                _row("sync", 0, 0.5), _row("sync", 1, 0.7)]))
    assert ablate_effects.main([str(path)]) == 0
    # sqrt(0.005 / 2 + 0.02 / 2)
    assert "| sync | 2 | +0.050 ± 0.112 (within 2 SE; n 2/2)" in capsys.readouterr().out
    path.write_text(json.dumps({"config": "full"}))
    with pytest.raises(SystemExit):
        ablate_effects.main([str(path)])
    assert "not an ablation's results" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ablate_effects.main([str(tmp_path / "missing.json")])
    assert "missing.json" in capsys.readouterr().err
