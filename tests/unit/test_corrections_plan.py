"""What a correction is worth against a demonstration (app.ablation.corrections and the runner's
dry run): names, the parse of the steps' outputs, the gains and the table. No broker."""

from __future__ import annotations

import pytest

from app.ablation import corrections as C
from app.ablation.correction_runs import main

TASKS = ["a", "b"]


def row(seed, means, pairs_c=(5, 5), pairs_d=(5, 5)):
    scores = {arm: {t: {"mean": m, "episodes": 100} for t, m in zip(TASKS, ms)} for arm, ms in means.items()}
    pairs = {"c": dict(zip(TASKS, pairs_c)), "d": dict(zip(TASKS, pairs_d))}
    return C.seed_row(seed, scores, pairs, TASKS)


def test_the_dpo_output_names_the_version_it_published():
    out = "x\npublished pixel version 148 (reference v147) after DPO on 20 pairs ...\n"
    assert C.published_version(out) == 148
    assert C.published_version("DPO failed") is None


def test_each_arm_gains_over_v_alone_on_the_same_instances_per_pair_per_task():
    r = row(0, {"0": (0.2, 0.4), "c": (0.4, 0.6), "d": (0.2, 0.5)}, pairs_c=(4, 6), pairs_d=(5, 5))
    assert r["arms"]["0"]["mean"] == pytest.approx(0.3)
    assert C.gain(r, "c") == pytest.approx(0.2) and C.gain(r, "d") == pytest.approx(0.05)
    assert C.per_datum(r, "c", TASKS) == pytest.approx(0.2 / 5)
    assert C.per_datum(r, "d", TASKS) == pytest.approx(0.05 / 5)


def test_an_arm_missing_a_task_has_no_mean_and_no_gain():
    r = C.seed_row(0, {"0": {"a": {"mean": 0.2, "episodes": 9}}, "c": {}}, {"c": {}, "d": {}}, TASKS)
    assert r["arms"]["0"]["mean"] is None and C.gain(r, "c") is None and C.per_datum(r, "c", TASKS) is None


def test_the_table_gives_each_arm_its_success_and_gains_with_their_spread():
    rows = [row(0, {"0": (0.2, 0.4), "c": (0.4, 0.6), "d": (0.2, 0.5)}),
            row(1, {"0": (0.2, 0.2), "c": (0.3, 0.3), "d": (0.3, 0.3)})]
    lines = C.table(rows, TASKS)
    c = next(line for line in lines if line.startswith("| V + DPO on corrections"))
    assert "| 2 | 0.350 | 0.450 | 0.400 | 5.0 | +0.150 ± 0.050 | +0.030 ± 0.010 |" in c
    assert next(line for line in lines if line.startswith("| V alone")).endswith("| - | - | - |")


def test_the_corrector_counts_only_what_it_corrected():
    tally = {"a": {"corrected": 3, "no_error": 2}, "b": {"diverged": 1}}
    assert C.corrected_counts(tally, TASKS) == {"a": 3, "b": 0}


def test_the_dry_run_prints_every_step_on_the_source_runs_topics(capsys):
    assert main(["--seeds", "1", "--k", "2", "--tasks", "a,b", "--tag", "t", "--dry-run", "--out", "/nonexistent"]) == 0
    out = capsys.readouterr().out
    assert "cor-t-src-s1: demo --run-id cor-t-src-s1" in out and "--start-from fewg-n3-s1" in out
    assert "--rollout-args=--greedy" in out.split("correct:")[0]  # the source run, and only it, acts greedily
    assert "FLYWHEEL_TOPIC_PREFIX=demo-cor-t-src-s1." in out
    assert "--corrections 2 --annotator cor-t-person-c-s1" in out
    assert "--annotators human:cor-t-person-d-s1" in out
    for arm in ("0", "c", "d"):
        assert f"--run-id cor-t-eval-{arm}-s1" in out and "--seed 51" in out
    assert out.count("--rollout-args") == 1


def test_the_report_is_rewritten_from_the_results_of_the_same_settings(tmp_path):
    import json

    rows = [row(0, {"0": (0.2, 0.4), "c": (0.4, 0.6), "d": (0.2, 0.5)})]
    settings = {"tasks": TASKS, "k": 5, "source_episodes": 30, "eval_episodes": 100, "dpo_args": ""}
    (tmp_path / "results.json").write_text(json.dumps({"settings": settings, "rows": rows}))
    assert main(["--tasks", "a,b", "--seeds", "0", "--out", str(tmp_path), "--report-only"]) == 0
    text = (tmp_path / "README.md").read_text()
    assert "seeds 0" in text and "| V + DPO on corrections | 1 | 0.400 | 0.600 | 0.500 | 5.0 | +0.200 (1 seed)" in text
    assert f"Command: `python -m benchmarks.corrections --tasks a,b --seeds 0 --out {tmp_path}`" in text, \
        "every option as given, less --report-only (it re-reads; it does not measure)"
    with pytest.raises(SystemExit, match="other settings"):  # another k: neither mixed in nor overwritten
        main(["--tasks", "a,b", "--seeds", "0", "--k", "3", "--out", str(tmp_path), "--report-only"])
    assert json.loads((tmp_path / "results.json").read_text())["rows"] == rows
