"""The demo's self-imitation setting (--sil-coef, app.run_config.kind_sil_coef): on auto it is on,
with the entropy band, where a run has neither RFT rounds nor a teacher during RL (from random
weights; the games after their cold start), off on the default suite whose recipe keeps RFT
rounds; a value the user gave wins, as the other automatic options' do."""

from __future__ import annotations

import pytest

from app import run_config
from app.demo_children import trainer_config
from app.demo_config import DemoConfig, effective
from infra.runtime.errors import UserError
from producers.suites import get_suite, plan

DEMONSTRABLE = frozenset(get_suite("games").tasks) | frozenset(get_suite("default").tasks)  # scripted solvers' stand-in


def trainer_of(**demo):
    cfg, _, _ = effective(DemoConfig(**demo), DEMONSTRABLE)
    return trainer_config(cfg, "demo-x.", "pixel-x", plan(cfg.tasks, cfg.max_steps), {})


def test_auto_self_imitation_is_on_from_random_weights_and_on_the_teacher_free_games():
    for demo in ({"tasks": ["starter"], "cold_start_demos": 0}, {"tasks": ["games"]}):
        got = trainer_of(**demo)
        assert got.train.rft_every == 0 and got.train.dagger_every == 0 and got.train.expert_coef == 0
        assert (got.train.sil_coef, got.train.ent_floor) == (run_config.SIL_COEF, run_config.SIL_ENT_FLOOR)
        assert got.origins["sil_coef"] == "kind"


def test_auto_self_imitation_is_on_on_the_default_suite_without_its_rft_rounds():
    """PPO's own share (the default suite's recipe less its RFT rounds): no rounds, no teacher."""
    for demo in ({"rft_every": 0}, {"trainer_args": "--rft-every 0"}):
        got = trainer_of(**demo)
        assert got.train.rft_every == 0 and got.train.lr == 3e-4  # after the cold start: its learning rate
        assert (got.train.sil_coef, got.train.ent_floor) == (run_config.SIL_COEF, run_config.SIL_ENT_FLOOR)
        assert got.origins["sil_coef"] == "kind"


def test_auto_self_imitation_is_off_where_rft_rounds_or_a_teacher_run():
    default = trainer_of()  # the default suite after its cold start: RFT rounds every 4 updates
    assert default.train.rft_every > 0 and (default.train.sil_coef, default.train.ent_floor) == (0.0, 0.0)
    assert trainer_of(tasks=["starter"], cold_start_demos=0, rft_every=2).train.sil_coef == 0.0
    assert trainer_of(tasks=["games"], dagger_every=2).train.sil_coef == 0.0
    assert trainer_of(tasks=["games"], expert_coef=0.5).train.sil_coef == 0.0
    assert trainer_of(tasks=["starter"], cold_start_demos=0, trainer_args="--nproc-per-node 2").train.sil_coef == 0.0


def test_the_users_sil_coef_wins_and_brings_the_band_with_it():
    on = trainer_of(sil_coef=0.2)  # on the default suite too, beside its RFT rounds
    assert (on.train.sil_coef, on.train.ent_floor, on.origins["sil_coef"]) == (0.2, run_config.SIL_ENT_FLOOR, "run")
    off = trainer_of(tasks=["starter"], cold_start_demos=0, sil_coef=0.0)
    assert (off.train.sil_coef, off.train.ent_floor, off.origins["sil_coef"]) == (0.0, 0.0, "run")
    mine = trainer_of(tasks=["starter"], cold_start_demos=0, trainer_args="--sil-coef 1 --ent-floor 0.2")
    assert (mine.train.sil_coef, mine.train.ent_floor) == (1.0, 0.2)


@pytest.mark.parametrize("bad", [-0.5, float("nan")])
def test_a_bad_sil_coef_is_refused(bad):
    with pytest.raises(UserError, match="sil-coef"):
        DemoConfig(sil_coef=bad).validate()


@pytest.mark.parametrize("trainer_args", ["--sil-coef 0", "--rft-every 4", "--expert-coef 1 --dagger-every 2"])
def test_auto_self_imitation_reads_what_the_trainer_args_set(trainer_args):
    """--trainer-args win over every layer: a --sil-coef 0 there takes the band that came with
    auto self-imitation too, and RFT rounds or a teacher set there keep auto self-imitation off,
    as the demo's own options do."""
    got = trainer_of(tasks=["starter"], cold_start_demos=0, trainer_args=trainer_args).train
    assert (got.sil_coef, got.ent_floor) == (0.0, 0.0)


@pytest.mark.parametrize("passed, on", [
    ({}, True), ({"rft_every": 0, "sil_coef": "1"}, True),  # a parsed layer's values are strings
    ({"rft_every": "4"}, False), ({"expert_coef": 0.5}, False), ({"dagger_every": "2"}, False),
    ({"nproc_per_node": "2"}, False), ({"sil_coef": "0"}, False),
])
def test_auto_self_imitation_is_decided_from_what_the_run_passes_the_trainer(passed, on):
    assert run_config.kind_sil_coef(DemoConfig(), passed) == (run_config.SIL_COEF if on else 0.0)
    assert run_config.kind_sil_coef(DemoConfig(policy_kind="lm"), passed) == 0.0  # no fine-tuning on its own successes
