"""The merging experiment's pure parts (app.ablation.merge, issue 59): the α list, the command lines
(parsed by `flywheel demo`'s and `flywheel merge`'s own parsers), and results, table and α curve
shaped from made-up numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import demo_cli
from app.ablation import merge as M
from app.demo_config import DemoConfig, effective
from infra.runtime.command import parse_command
from infra.runtime.config import resolve
from trainer import cli as trainer_cli


def test_the_alpha_list_and_the_merge_weights():
    assert M.alphas("") == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert M.alphas("0,0.5,1") == [0.0, 0.5, 1.0]
    for bad in ("1.5", "-0.1", "x", ","):
        with pytest.raises(ValueError):
            M.alphas(bad)
    assert [M.merge_alphas(a) for a in (0.0, 0.25, 1.0)] == ["1,0", "0.75,0.25", "0,1"]  # (web, games)


def _demo(argv: list[str]) -> DemoConfig:
    """The DemoConfig `flywheel demo <argv>` would run with (its own parser), validated."""
    return resolve(DemoConfig, parse_command(demo_cli.register, "demo", argv[4:])).validate()


def test_the_demo_command_lines_parse_and_say_what_the_experiment_means(tmp_path):
    sft = _demo(M.demo_argv("mrg-sft-s0", M.SFT_TASKS, 15, 0, tmp_path, M.sft_extra()))
    assert (sft.tasks, sft.until_version, sft.start_from, sft.cold_start_demos) == (["default", "games"], 1, "", -1)
    fewer = _demo(M.demo_argv("mrg-sft-s0", M.SFT_TASKS, 15, 0, tmp_path, M.sft_extra("", 10)))
    assert fewer.cold_start_demos == 10 and "--cold-start-demos" not in M.rl_extra("mrg-sft-s0@4")
    web = _demo(M.demo_argv("mrg-web-s0", "default", 30, 0, tmp_path, M.rl_extra("mrg-sft-s0@4", "--workers 1")))
    assert (web.start_from, web.minutes, web.seed, web.keep_broker, web.workers) == ("mrg-sft-s0@4", 30, 0, True, 1)
    ev = _demo(M.demo_argv("mrg-eval-a0.5-games-s0", "games", 8, 0, tmp_path, M.eval_extra("mrg-pool-s0@5", 20)))
    assert (ev.start_from, ev.curriculum, ev.episodes, ev.batch_episodes) == ("mrg-pool-s0@5", False, 20, M.NO_TRAINING)
    assert ev.until_episodes == 20  # it ends once its episodes are played, not at its minutes
    many = _demo(M.demo_argv("mrg-eval-a0-web-s0", "default", 8, 0, tmp_path, M.eval_extra("mrg-pool-s0@5", 150)))
    assert many.until_episodes == 0  # beyond the reading's window of 100: its minutes
    ev, _, _ = effective(ev)
    assert (ev.cold_start_demos, ev.value_pretrain_batches, ev.rft_every, ev.sil_coef, ev.dpo_span_s()) == (0, 0, 0, 0, 0)
    assert ev.batch_episodes > ev.episodes * 100  # the trainer's batch never fills: the version is never updated
    trainer = parse_command(trainer_cli.register, "train", ev.trainer_args.split())
    assert int(trainer["max_batch_steps"]) > ev.episodes * 1000 and float(trainer["max_wait_s"]) > 24 * 3600  # nor a partial one


def test_an_evaluation_run_that_updated_its_version_is_refused():
    assert M.untrained({"rl_update": False, "base_version": 147, "published": 147}) is None
    assert "published v154 past the v147" in M.untrained({"rl_update": True, "base_version": 147, "published": 154})


def test_the_merge_command_line_runs_on_the_pool_topics():
    argv = M.merge_argv("demo-mrg-pool-s0.", "pixel-mrg-pool-s0", (1, 2), 0.25)
    assert argv[:2] == ["env", "FLYWHEEL_TOPIC_PREFIX=demo-mrg-pool-s0."]
    args = parse_command(trainer_cli.register, "merge", argv[6:])
    assert (args["policy"], args["versions"], args["alphas"]) == ("pixel-mrg-pool-s0", "1,2", "0.75,0.25")


def test_run_ids_are_ones_the_demo_accepts():
    from app.demo_config import RUN_ID

    ids = [M.run_id(M.eval_role(M.label_of(a), d), 2, "t1") for a in M.ALPHAS for d in M.DOMAINS]
    assert all(RUN_ID.fullmatch(i) for i in ids) and len(set(ids)) == len(ids)
    assert M.run_id("sft", 0) == "mrg-sft-s0"


def _scores(web: float, games: float) -> dict:
    return {"web": M.domain_score([{"task": "click-test", "episodes": 20, "mean": web + 0.1},
                                   {"task": "enter-text", "episodes": 20, "mean": web - 0.1}]),
            "games": M.domain_score([{"task": "games.snake", "episodes": 20, "mean": games}])}


def _results() -> list[dict]:
    rows = []
    for seed, shift in ((0, 0.0), (1, 0.02)):
        rows.append(M.row(seed, "pi_sft", None, _scores(0.5 + shift, 0.2)))
        for a in M.ALPHAS:  # the web specialist at 0.8, the games one at 0.6; the middle keeps most of both
            rows.append(M.row(seed, f"merge α={a:g}", a, _scores(0.8 - 0.2 * a + shift, 0.3 + 0.3 * a)))
        rows.append(M.row(seed, "joint", None, _scores(0.7 + shift, 0.5)))
    return rows


def test_a_domain_is_the_mean_over_its_tasks_with_their_figures():
    s = _scores(0.6, 0.3)["web"]
    assert s["mean"] == pytest.approx(0.6) and s["se"] == pytest.approx(0.1)  # sd 0.1414 / sqrt 2
    assert s["tasks"]["enter-text"] == {"mean": pytest.approx(0.5), "episodes": 20}
    assert M.domain_score([])["mean"] is None


def test_each_merge_is_read_against_the_specialists_on_their_own_domains():
    rel = M.relative_to_specialist(_results())
    assert rel[(0, 0.0)]["web"] == pytest.approx(1.0) and rel[(0, 1.0)]["games"] == pytest.approx(1.0)
    assert rel[(0, 0.5)]["web"] == pytest.approx(0.7 / 0.8) and rel[(0, 0.5)]["games"] == pytest.approx(0.45 / 0.6)
    assert M.relative_to_specialist([M.row(0, "merge α=0.5", 0.5, _scores(0.5, 0.5))])[(0, 0.5)] == \
        {"web": None, "games": None}  # no specialist measured: nothing to compare with
    from_json = [{**r, "alpha": int(r["alpha"])} if r["alpha"] in (0.0, 1.0) else r for r in _results()]
    assert M.relative_to_specialist(from_json)[(0, 1.0)]["games"] == pytest.approx(1.0)  # an α read back as 1, not 1.0


def test_the_table_has_pi_sft_then_the_alphas_then_joint_with_their_spread():
    lines = M.table(_results())
    assert lines[0].startswith("| policy | α") and len(lines) == 2 + 1 + len(M.ALPHAS) + 1
    assert lines[2].startswith("| pi_sft | - | 2 | 0.510 ± 0.014 | 0.200 ± 0.000 |")
    assert lines[3].startswith("| merge α=0 | 0 | 2 | 0.810 ± 0.014 | 0.300 ± 0.000 | 1.000 ± 0.000 |")
    assert lines[-1].startswith("| joint | - | 2 | 0.710 ± 0.014 | 0.500 ± 0.000 |")


def test_each_specialist_is_read_against_its_own_seeds_pi_sft_over_the_tasks_both_scored():
    def web(a: float, b: float, c: float | None = None) -> dict:
        rows = [{"task": "click-test", "episodes": 10, "mean": a}, {"task": "enter-text", "episodes": 10, "mean": b}]
        rows += [{"task": "login-user", "episodes": 10, "mean": c}] if c is not None else []
        return {"web": M.domain_score(rows), "games": M.domain_score([{"task": "games.2048", "episodes": 10, "mean": 0.2}])}

    base, spec = M.row(0, "pi_sft", None, web(0.5, 0.5)), M.row(0, "merge α=0", 0.0, web(0.7, 0.9, 1.0))
    gain, se = M.paired_gain(base, spec, "web")  # login-user only in one: left out
    assert gain == pytest.approx(0.3) and se == pytest.approx(0.1)  # diffs 0.2, 0.4: sd 0.1414 / sqrt 2
    assert M.paired_gain(base, spec, "games") == (pytest.approx(0.0), None)  # one task: no spread
    assert M.paired_gain(base, M.row(0, "x", 0.0, {"web": M.domain_score([])}), "web") is None

    lines = M.specialist_gains([base, spec, M.row(1, "pi_sft", None, web(0.4, 0.6)), M.row(1, "merge α=0", 0.0, web(0.5, 0.6))])
    assert lines[0].startswith("| specialist (own domain) |") and len(lines) == 4
    # seed 0 +0.3 ± 0.1 (3.0 SEs); seed 1 diffs 0.1, 0.0: +0.05 ± 0.05; over seeds 0.175 ± 0.125
    assert lines[2] == "| web (MiniWoB++ success) | s0 +0.300 ± 0.100, 3.0; s1 +0.050 ± 0.050, 1.0 | +0.175 ± 0.125 |"
    assert lines[3] == "| games (normalised score) | - | - |"  # no games specialist (α = 1) measured
    assert M.specialist_gains(_results())[3].endswith("| +0.400 ± 0.000 |")  # 0.2 -> 0.6 on both seeds


def test_the_alpha_curve_and_its_plot(tmp_path: Path):
    xs, ys = M.curve(_results(), "games")
    assert xs == list(M.ALPHAS) and ys == pytest.approx([0.3 + 0.3 * a for a in M.ALPHAS])
    assert M.level(_results(), "joint", "web") == pytest.approx(0.71)
    M.plot(_results(), tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 5000


def test_the_report_gives_the_command_with_every_option_it_was_given(tmp_path: Path):
    from app.ablation import merge_runs

    given = ["--seeds", "0,1", "--minutes", "8", "--eval-episodes", "10", "--eval-minutes", "3", "--tag", "s8",
             "--demo-args", "--sandboxes 3", "--out", str(tmp_path)]
    text = merge_runs.write_report(_results(), tmp_path, merge_runs.parse(given)).read_text()
    assert (f"Command: `python -m benchmarks.merge_curve --seeds 0,1 --minutes 8 --eval-episodes 10 --eval-minutes 3 "
            f"--tag s8 --demo-args '--sandboxes 3' --out {tmp_path}`") in text
    assert "| web (MiniWoB++ success) | s0 +0.300 ± 0.000; s1 +0.300 ± 0.000 | +0.300 ± 0.000 |" in text


def test_an_attempt_keeps_a_finished_run_and_reruns_an_unfinished_one_under_the_next_id():
    assert M.attempt("mrg-web-s0", {}) == ("mrg-web-s0", False)  # never started: run it
    assert M.attempt("mrg-web-s0", {"mrg-web-s0": True}) == ("mrg-web-s0", True)  # finished: keep it
    assert M.attempt("mrg-web-s0", {"mrg-web-s0": False}) == ("mrg-web-s0-r2", False)  # its id is claimed
    assert M.attempt("mrg-web-s0", {"mrg-web-s0": False, "mrg-web-s0-r2": True}) == ("mrg-web-s0-r2", True)
    assert M.attempt("mrg-web-s0", {"mrg-web-s0": False, "mrg-web-s0-r2": False}) == ("mrg-web-s0-r3", False)
    assert M.attempt("mrg-web-s0", {"mrg-web-s0-r2": True}) == ("mrg-web-s0", False)  # the first id comes first


def test_a_pool_is_kept_only_as_built_and_while_the_broker_holds_every_merge():
    plan = M.pool_plan("mrg-web-s0@9", "mrg-games-s0@7", [0.0, 0.5, 1.0])
    assert M.pool_versions(plan["alphas"]) == [(0.0, 3), (0.5, 4), (1.0, 5)]
    assert M.pool_state(None, plan, set()) == "build"  # never built
    assert M.pool_state(plan, plan, {1, 2, 3, 4, 5}) == "kept"
    assert M.pool_state(plan, plan, set()) == "build"  # built on a broker since gone: the copies are made again
    assert M.pool_state(None, plan, {1, 2, 3}) == "next"  # half built (no pool.json yet)
    assert M.pool_state(plan, plan, {1, 2, 3, 5}) == "next"  # a merge compacted away
    other = M.pool_plan("mrg-web-s0-r2@8", "mrg-games-s0@7", [0.0, 0.5, 1.0])
    assert M.pool_state(plan, other, {1, 2, 3, 4, 5}) == "next"  # built from another run
    assert M.pool_state(plan, M.pool_plan("mrg-web-s0@9", "mrg-games-s0@7", [0.0, 1.0]), {1, 2, 3, 4, 5}) == "next"

def _runner(tmp_path, monkeypatch, summary_notes=()):
    """A merge_runs.Runner on ``tmp_path`` whose demos are fakes: each records its argv and
    writes a summary.json with ``summary_notes``; -> (runner, the argvs run)."""
    import argparse
    import json

    from app.ablation import marked, merge_runs

    ran: list[list[str]] = []

    def child(argv, cwd):
        ran.append(argv)
        if "--report-dir" in argv:
            Path(argv[argv.index("--report-dir") + 1], "summary.json").write_text(json.dumps({"notes": list(summary_notes)}))
        return 0

    monkeypatch.setattr(merge_runs, "run_child", child)  # the pool's merges
    monkeypatch.setattr(marked, "run_child", child)  # the demos
    return merge_runs.Runner(argparse.Namespace(tag="", dry_run=False, alphas=[0.0, 0.5, 1.0]), tmp_path), ran


def test_a_rerun_keeps_the_finished_runs_and_reruns_the_unfinished_one(tmp_path, monkeypatch):
    """Runner.demo on a folder of an earlier invocation: the run that finished with this command
    is not run again, the one a cut-off left unfinished runs again under its next id, one of other
    options (a short trial) is never taken for it, and a run's id is its folder's."""
    import json

    from app.ablation import marked, merge_runs
    from app.ablation.marked import UNFINISHED
    from app.ablation.runs import recipe

    r, ran = _runner(tmp_path, monkeypatch)
    runs = tmp_path / "runs"
    (runs / "mrg-sft-s0").mkdir(parents=True)
    (runs / "mrg-sft-s0" / "outcome.json").write_text(json.dumps({"base_version": 4}))
    sft_argv = M.demo_argv("mrg-sft-s0", M.SFT_TASKS, 15, 0, runs / "mrg-sft-s0", M.sft_extra())
    (runs / "mrg-sft-s0" / M.COMMAND).write_text(json.dumps(sft_argv[3:]))
    (runs / "mrg-sft-s0" / M.RECIPE_FILE).write_text(recipe(M.SFT_TASKS) + "\n")
    (runs / "mrg-web-s0").mkdir()
    (runs / "mrg-web-s0" / UNFINISHED).write_text("started, not ended\n")
    sft = r.demo("sft", 0, M.SFT_TASKS, 15, M.sft_extra())
    assert (sft.name, ran, r.outcome(sft, "base_version")) == ("mrg-sft-s0", [], 4)
    web = r.demo("web", 0, "default", 30, M.rl_extra("mrg-sft-s0@4"))
    assert web.name == "mrg-web-s0-r2" and len(ran) == 1
    assert ran[0][ran[0].index("--run-id") + 1] == "mrg-web-s0-r2"
    assert ran[0][ran[0].index("--report-dir") + 1] == str(web)
    assert not (web / UNFINISHED).exists() and (runs / "mrg-web-s0" / UNFINISHED).exists()
    with pytest.raises(merge_runs.StepFailed, match="no outcome.json"):
        r.outcome(web, "published")  # the fake demo wrote none
    again = r.demo("web", 0, "default", 30, M.rl_extra("mrg-sft-s0@4"))
    assert again == web and len(ran) == 1  # now finished: kept
    shorter = r.demo("web", 0, "default", 1, M.rl_extra("mrg-sft-s0@4"))  # other minutes: not that run
    assert shorter.name == "mrg-web-s0-r3" and len(ran) == 2
    assert r.demo("sft", 0, M.SFT_TASKS, 15, M.sft_extra("--sandboxes 2")).name == "mrg-sft-s0-r2"
    assert (web / M.RECIPE_FILE).read_text().strip() == recipe("default")  # recorded as it started
    (web / M.RECIPE_FILE).write_text("an-earlier-recipe\n")  # the same options a session before a recipe change
    assert M.not_kept(web, json.loads((web / M.COMMAND).read_text()), recipe("default")).startswith("another recipe")
    assert r.demo("web", 0, "default", 30, M.rl_extra("mrg-sft-s0@4")).name == "mrg-web-s0-r4" and len(ran) == 4


def test_a_demo_stopped_by_someone_else_is_not_kept(tmp_path, monkeypatch):
    """A demo stopped from outside writes its report and exits 0: not a finished run."""
    from app.ablation import marked, merge_runs
    from app.ablation.marked import UNFINISHED

    r, ran = _runner(tmp_path, monkeypatch, ["stopped by SIGTERM after 3.0 of 30 min"])
    with pytest.raises(merge_runs.StepFailed, match="stopped by SIGTERM"):
        r.demo("games", 0, "games", 30, M.rl_extra("mrg-sft-s0@4"))
    folder = tmp_path / "runs" / "mrg-games-s0"
    assert "stopped by SIGTERM" in (folder / UNFINISHED).read_text()
    r2, _ = _runner(tmp_path, monkeypatch)
    assert r2.demo("games", 0, "games", 30, M.rl_extra("mrg-sft-s0@4")).name == "mrg-games-s0-r2"


def test_the_pool_is_built_once_kept_while_held_and_rebuilt_under_the_next_id_when_half_gone(tmp_path, monkeypatch):
    import json

    from app.ablation import merge_runs

    r, ran = _runner(tmp_path, monkeypatch)
    held: dict[str, set[int]] = {}
    copies: list[tuple[str, int]] = []

    class PV:
        def __init__(self, v):
            self.version = v

    monkeypatch.setattr(merge_runs, "load_settings", lambda over: over)
    monkeypatch.setattr(merge_runs, "ensure_topics", lambda settings: None)
    monkeypatch.setattr(merge_runs.versions, "scan", lambda settings, policy: [PV(v) for v in held.get(policy, ())])
    monkeypatch.setattr(merge_runs, "copy_into", lambda settings, start, kind, policy, version: copies.append((str(start), version)))
    run, merged = r.pool(0, "mrg-web-s0@9", "mrg-games-s0@7")
    assert (run, merged, copies) == ("mrg-pool-s0", [(0.0, 3), (0.5, 4), (1.0, 5)], [("mrg-web-s0@9", 1), ("mrg-games-s0@7", 2)])
    assert [a[a.index("--alphas") + 1] for a in ran] == ["1,0", "0.5,0.5", "0,1"]
    assert json.loads((tmp_path / "runs" / run / merge_runs.POOL).read_text()) == M.pool_plan("mrg-web-s0@9", "mrg-games-s0@7", [0.0, 0.5, 1.0])
    held["pixel-mrg-pool-s0"] = {1, 2, 3, 4, 5}
    assert r.pool(0, "mrg-web-s0@9", "mrg-games-s0@7") == (run, merged) and len(ran) == 3  # kept: nothing made
    held["pixel-mrg-pool-s0"] = {1, 2, 3, 5}  # a merge compacted away: the next id, built whole
    assert r.pool(0, "mrg-web-s0@9", "mrg-games-s0@7")[0] == "mrg-pool-s0-r2" and len(ran) == 6 and len(copies) == 4
