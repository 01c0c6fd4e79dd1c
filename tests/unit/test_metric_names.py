"""Trainer metric names (trainer.core.metric_names): every name says a declared group, the trainers
report under those names, and ClickHouse's view maps names written before the groups as
``RENAMED`` does."""

from __future__ import annotations

import re

import torch

from infra.clickhouse.client import load_migrations
from trainer.core import metric_names as M


def test_every_declared_name_has_a_declared_group_and_one_constant():
    names = [v for k, v in vars(M).items() if k.isupper() and isinstance(v, str)]
    assert len(names) > 30
    assert [n for n in names if M.group(n) not in M.GROUPS] == []
    assert len(set(names)) == len(names)
    assert M.group(M.merge_alpha(3)) == "merge" and M.group("pg_loss") == ""


def test_renamed_names_are_todays():
    assert [new for new in M.RENAMED.values() if M.group(new) not in M.GROUPS] == []
    assert all(M.current(new) == new for new in M.RENAMED.values())
    assert M.current("pg_loss") == "losses/pg_loss" and M.current("ct_loss") == "losses/ct_loss"
    assert M.current("custom") == "custom"


def test_ppo_update_reports_its_metrics_under_their_groups():
    from trainer.rl.config import TrainConfig
    from tests.unit.ppo_samples import tiny_policy_and_samples
    from trainer.rl.update import collate, ppo_update

    policy, samples = tiny_policy_and_samples([float(k % 2) for k in range(4)])
    cfg = TrainConfig(epochs=1, minibatch_size=4)
    m = ppo_update(policy, torch.optim.Adam(policy.parameters()), collate(samples), cfg)
    assert set(m) == {
        "losses/pg_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/clip_frac",
        "value/explained_variance", "value/reward_corr",
        "batch/reward_mean", "batch/success_rate", "batch/episodes", "batch/steps", "batch/episode_length",
        "train/critic_only", "train/nonfinite_skipped", "train/epochs", "perf/update_time_s",
    }


def test_dpo_and_merge_report_under_their_groups():
    from trainer.dpo.train import dpo_loss
    from trainer.serving.merge import MergePlan

    _, stats = dpo_loss(torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.zeros(2), beta=0.1)
    assert set(stats) == {"losses/dpo_loss", "dpo/reward_margin", "dpo/accuracy", "dpo/chosen_reward",
                          "dpo/rejected_reward"}
    assert MergePlan("p", [3, 5], [0.25, 0.75]).metrics() == {"merge/alpha_v3": 0.25, "merge/alpha_v5": 0.75}


def test_the_trainer_metrics_view_maps_old_names_as_renamed_does():
    view = [s for m in load_migrations() for s in m.statements if "VIEW v_trainer_metrics" in s][-1]
    pairs = re.findall(r"'([^']*)',\s*'([^']*)'", view[view.index("map("):view.index(") AS renamed")])
    assert len(pairs) == len(M.RENAMED) and dict(pairs) == M.RENAMED
