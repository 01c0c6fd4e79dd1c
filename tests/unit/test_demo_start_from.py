"""`flywheel demo --start-from RUN[@VERSION]` (issue 59): RL from another run's version, without a
cold start, with the settings of a run after one; the source read from that run's own topics."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from app import start_from, taught
from app.demo_config import RUN_ID, DemoConfig, effective
from app.demo_report import resolved
from infra.runtime.errors import UserError
from infra.runtime.settings import load_settings

SOLVED = frozenset({"click-test", "enter-text"})


def test_parse_names_a_run_and_optionally_its_version():
    assert start_from.parse("sft-s0", RUN_ID) == start_from.StartFrom("sft-s0", None)
    assert start_from.parse("sft-s0@7", RUN_ID) == start_from.StartFrom("sft-s0", 7)
    assert str(start_from.StartFrom("sft-s0", 7)) == "sft-s0@7"
    s = start_from.StartFrom("sft-s0")
    assert (s.prefix, s.policy("pixel")) == ("demo-sft-s0.", "pixel-sft-s0")  # as app.demo_config.run_names names them
    for bad in ("", "@3", "sft-s0@", "sft-s0@x", "sft-s0@-1", "a b@1"):
        with pytest.raises(UserError):
            start_from.parse(bad, RUN_ID)


def test_a_run_from_a_version_has_no_cold_start_and_the_settings_of_one():
    cfg, cold, _ = effective(DemoConfig(tasks=["click-test"], start_from="sft-s0@3"), SOLVED)
    assert (cfg.cold_start_demos, cold.per_task, cold.demonstrated) == (0, 0, ())
    assert cold.lines == ("no cold start: RL starts from sft-s0@3 (--start-from), copied unchanged",), \
        "the header does not say 'from random weights' of a run from a version"
    after, _, _ = effective(DemoConfig(tasks=["click-test"]), SOLVED)  # a cold start's run
    scratch, _, _ = effective(DemoConfig(tasks=["click-test"], cold_start_demos=0), SOLVED)
    assert cfg.value_pretrain_batches == after.value_pretrain_batches == 20 != scratch.value_pretrain_batches
    assert resolved(cfg) == resolved(after)  # the trainer's learning rate, KL bound and RFT rounds
    assert (resolved(cfg)["ppo_lr"], resolved(cfg)["target_kl"]) != (resolved(scratch)["ppo_lr"],
                                                                  resolved(scratch)["target_kl"])


def test_a_run_from_a_version_refuses_a_cold_start_or_a_bad_name():
    with pytest.raises(UserError, match="no cold start"):
        DemoConfig(start_from="sft-s0", cold_start_demos=5).validate()
    with pytest.raises(UserError, match="no cold start"):
        DemoConfig(start_from="sft-s0", demos_from="human").validate()
    with pytest.raises(UserError, match="run id"):
        DemoConfig(start_from="no/such@1").validate()


def test_the_source_is_read_from_its_runs_topics(monkeypatch):
    seen = []
    monkeypatch.setattr(start_from.versions, "latest", lambda s, p: seen.append((s.topic_prefix, p)) or "pv-latest")
    monkeypatch.setattr(start_from.versions, "history",
                        lambda s, p, wanted: seen.append((s.topic_prefix, p, wanted)) or {wanted[0]: "pv-3"})
    mine = load_settings({"topic_prefix": "demo-spec-s0."})
    assert start_from.source_version(mine, start_from.StartFrom("sft-s0"), "pixel") == "pv-latest"
    assert start_from.source_version(mine, start_from.StartFrom("sft-s0", 3), "pixel") == "pv-3"
    assert seen == [("demo-sft-s0.", "pixel-sft-s0"), ("demo-sft-s0.", "pixel-sft-s0", [3])]
    monkeypatch.setattr(start_from.versions, "latest", lambda s, p: None)
    with pytest.raises(UserError, match="no published version"):
        start_from.source_version(mine, start_from.StartFrom("sft-s0"), "pixel")


def test_the_newest_version_of_a_run_whose_topics_are_gone_is_read_from_clickhouse(monkeypatch):
    def gone(*_args):
        raise UserError("cannot read demo-old-s0.flywheel.policy.v1: unknown topic")

    monkeypatch.setattr(start_from.versions, "latest", gone)
    monkeypatch.setattr(start_from.versions, "clickhouse_history", lambda s, p: ["pv-1", "pv-2"] if p == "pixel-old-s0" else [])
    mine = load_settings({"topic_prefix": "demo-x-s0."})
    assert start_from.source_version(mine, start_from.StartFrom("old-s0"), "pixel") == "pv-2"
    with pytest.raises(UserError, match="no published version"):  # neither the topic nor the log holds one
        start_from.source_version(mine, start_from.StartFrom("other-s0"), "pixel")


def test_a_run_from_a_version_names_it_and_what_taught_that_version(tmp_path):
    """The version RL starts from is a teacher of the run: its report names it, and what taught it
    where that run's record is found (beside this run's report, as a benchmark keeps them): its
    run's base version (pi_sft) by the cold start alone, a later one by the run's sources."""
    start = start_from.parse("mrg-sft-s0@0", RUN_ID)
    places = start_from.report_places(start, tmp_path / "data", str(tmp_path / "runs" / "mrg-web-s0"))
    assert places == [tmp_path / "data" / "reports" / "mrg-sft-s0", tmp_path / "runs" / "mrg-sft-s0"]
    assert start_from.taught_by(places, 0) == ""  # no report anywhere
    places[1].mkdir(parents=True)
    (places[1] / "config.json").write_text(json.dumps({"taught_by": {"demonstrations": "scripted", "sources": [
        "reward", "scripted demonstrations (the cold start's pi_sft)", "RFT rounds every 8 updates re-cloning the "
        "demonstrations"]}}))
    (places[1] / "outcome.json").write_text(json.dumps({"base_version": 0, "published": 2}))
    assert start_from.taught_by(places, 0) == "scripted demonstrations (its run's cold start: pi_sft)"
    assert start_from.taught_by(places, 2) == ("reward, scripted demonstrations (the cold start's pi_sft), RFT rounds "
                                               "every 8 updates re-cloning the demonstrations")
    no_rl = SimpleNamespace(rft_every=8, expert_coef=0.0, dagger_every=0, sil_coef=0.0)
    line = taught.line(taught.taught_of(0, "scripted", 0.0, no_rl, start_from=str(start),
                                        start_taught=start_from.taught_by(places, 0)))
    assert line == ("Taught by: reward; the version it started from, mrg-sft-s0@0 (taught by: scripted demonstrations "
                    "(its run's cold start: pi_sft)); RFT rounds every 8 updates on the policy's own successes.")


@pytest.mark.parametrize("config", ["{not json", '{"taught_by": ["reward"]}', '{"taught_by": {"sources": "reward"}}'])
def test_a_broken_record_of_the_start_is_named_unknown_not_a_crash(tmp_path, config):
    (tmp_path / "config.json").write_text(config)
    said = start_from.taught_by([tmp_path], 3)
    assert said == ""
    unknown = taught.taught_of(0, "", 0.0, SimpleNamespace(rft_every=0, expert_coef=0.0, dagger_every=0, sil_coef=0.0),
                               start_from="mrg-sft-s0@3", start_taught=said)
    assert taught.line(unknown) == ("Taught by: reward; the version it started from, mrg-sft-s0@3 (what taught it: "
                                    "that run's report).")


def test_the_base_version_of_a_run_from_random_weights_or_from_another_version_says_so():
    assert start_from.version_taught({"demonstrations": "", "sources": ["reward"]}, 0, 0) == \
        "nothing: its run's random weights"
    assert start_from.version_taught({"demonstrations": "", "start_from": "a@0", "start_taught": "x"},
                                     0, 0) == "the version a@0 (taught by: x)"
    assert start_from.version_taught({"sources": ["reward"]}, None, 0) == "reward"  # base not recorded
