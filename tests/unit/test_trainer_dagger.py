"""DAgger rounds (trainer.sft.dagger): the trainer aggregates the expert's labels on the states
the policy visited and, every ``dagger_every`` PPO updates, fits the policy to them."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

from infra.runtime.config import ConfigError
from infra.runtime.consume_loop import CheckpointFile
from infra.runtime.settings import load_settings
from schemas.actions import Click
from tests.unit.ppo_samples import tiny_policy_and_samples
from trainer.core import metric_names as M
from trainer.rl import rounds, streaming_ppo as stream
from trainer.rl.config import TrainConfig
from trainer.rl.state import PPOState
from trainer.sft.dagger import LabelBuffer, dagger_round

EXPERT = Click(x=0.9, y=0.9)  # one corner cell of the 4 x 4 grid


def _labels_logprob(policy, samples) -> float:
    with torch.no_grad():
        lp, _, _ = policy.evaluate(torch.stack([s.images[0] for s in samples]), [s.instructions[0] for s in samples],
                                   [EXPERT] * len(samples))
    return float(lp.mean())


def test_the_buffer_keeps_a_tasks_newest_labelled_steps_only():
    buffer = LabelBuffer(3)
    obs = [torch.full((1, 2, 2), k, dtype=torch.uint8) for k in range(4)]
    assert buffer.add(obs[:2], ["a", "b"], [EXPERT, None], "t") == 1
    assert buffer.add(obs[2:], ["c", "d"], None, "t") == 0  # an episode without labels adds nothing
    assert buffer.add(obs, list("efgh"), [EXPERT, EXPERT, None, EXPERT], "t") == 3
    data = buffer.examples()
    assert data.instructions == ["e", "f", "h"] and data.tasks == ["t"] * 3  # "a" fell out: the newest 3 stay
    assert data.obs[:, 0, 0, 0].tolist() == [0, 1, 3]
    with pytest.raises(ValueError, match="at least one step"):
        LabelBuffer(0)


def test_a_full_buffer_takes_from_the_task_holding_the_most():
    buffer = LabelBuffer(6)
    step = torch.zeros((1, 2, 2), dtype=torch.uint8)
    buffer.add([step] * 6, [f"long{k}" for k in range(6)], [EXPERT] * 6, "long")  # fills it alone
    buffer.add([step] * 2, ["short0", "short1"], [EXPERT] * 2, "short")
    assert buffer.shares() == {"long": 4, "short": 2} and len(buffer) == 6
    buffer.add([step] * 5, [f"long{k}" for k in range(6, 11)], [EXPERT] * 5, "long")
    assert buffer.shares() == {"long": 4, "short": 2}  # the long task's new steps replace its own oldest
    buffer.add([step] * 4, [f"short{k}" for k in range(2, 6)], [EXPERT] * 4, "short")
    assert buffer.shares() == {"long": 3, "short": 3}  # then the short one's share grows to an even split
    assert buffer.examples().instructions == ["long8", "long9", "long10", "short3", "short4", "short5"]


def test_a_sampled_round_draws_distinct_steps_in_buffer_order_and_the_same_for_a_seed():
    buffer = LabelBuffer(100)
    buffer.add([torch.full((1, 2, 2), k, dtype=torch.uint8) for k in range(10)], list("abcdefghij"), [EXPERT] * 10, "t")
    drawn = buffer.examples(4, seed=7)
    assert len(drawn.actions) == 4 and drawn.instructions == sorted(set(drawn.instructions))
    assert drawn.obs[:, 0, 0, 0].tolist() == ["abcdefghij".index(c) for c in drawn.instructions]  # obs stay with their step
    assert buffer.examples(4, seed=7).instructions == drawn.instructions
    assert {tuple(buffer.examples(4, seed=k).instructions) for k in range(5)} != {tuple(drawn.instructions)}
    assert len(buffer.examples(0).actions) == len(buffer.examples(50).actions) == 10  # 0 or more than held: all


def test_a_round_fits_the_policy_to_the_labels_and_an_empty_one_does_nothing():
    policy, samples = tiny_policy_and_samples([1.0] * 6)
    policy.eval()  # as the trainer keeps it between updates
    buffer = LabelBuffer(100)
    untouched = copy.deepcopy(policy.state_dict())
    assert dagger_round(policy, buffer, 1, 1e-2, 4, seed=0) == {}
    assert all(torch.equal(v, untouched[k]) for k, v in policy.state_dict().items())
    for s in samples:
        buffer.add(s.images, s.instructions, [EXPERT], s.task)
    before = _labels_logprob(policy, samples)
    metrics = dagger_round(policy, buffer, 4, 1e-2, 4, seed=0)
    assert _labels_logprob(policy, samples) > before + 0.5
    assert metrics[M.DAGGER_STEPS] == 6
    assert metrics[M.DAGGER_LOSS] < metrics[M.DAGGER_LOSS_FIRST] <= -before + 1e-6
    assert not policy.training  # left in the mode it was in
    assert dagger_round(policy, buffer, 1, 1e-2, 4, seed=0, sample=2)[M.DAGGER_STEPS] == 2


def _learner(tmp_path, monkeypatch, policy, **cfg):
    monkeypatch.setattr(stream, "make_producer", lambda settings: None)  # nothing is sent here
    ckpt = CheckpointFile(tmp_path / "ckpt.json", PPOState)
    ckpt.checkpoint.state = PPOState(version=0, config={}, weights_file="w.pt")
    return stream.PPOLearner(TrainConfig(policy_name="p", **cfg), load_settings({"data_dir": str(tmp_path)}),
                             None, ckpt, policy, None, threading.Event(), None, "run")


def test_the_learner_aggregates_every_batch_and_fits_every_nth_ppo_update(tmp_path, monkeypatch):
    policy, samples = tiny_policy_and_samples([1.0] * 6)
    for k, s in enumerate(samples):
        s.experts = [EXPERT if k % 2 == 0 else None]
    learner = _learner(tmp_path, monkeypatch, policy, dagger_every=2, dagger_epochs=30, dagger_lr=1e-2)
    state = learner.state
    assert learner.rounds.dagger(samples[:2], state, critic_only=True) == {}  # value pretraining: aggregated, no round
    assert len(learner.rounds.labels) == 1 and state.dagger_updates == 0
    assert learner.rounds.dagger(samples[2:4], state, critic_only=False) == {}  # PPO update 1 of 2
    before = _labels_logprob(policy, samples)
    metrics = learner.rounds.dagger(samples[4:], state, critic_only=False)  # update 2: the round
    assert metrics[M.DAGGER_STEPS] == 3 and state.dagger_updates == 2  # the count is in the checkpoint's state
    assert _labels_logprob(policy, samples) > before + 0.5


def test_a_failed_round_is_counted_and_ppo_goes_on(tmp_path, monkeypatch):
    policy, samples = tiny_policy_and_samples([1.0] * 2)
    for s in samples:
        s.experts = [EXPERT]
    learner = _learner(tmp_path, monkeypatch, policy, dagger_every=1)

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: not enough memory")

    monkeypatch.setattr(rounds, "dagger_round", out_of_memory)
    state = learner.state
    assert learner.rounds.dagger(samples, state, critic_only=False) == {M.DAGGER_FAILED_TOTAL: 1.0}
    assert learner.rounds.dagger(samples, state, critic_only=False) == {M.DAGGER_FAILED_TOTAL: 2.0}
    assert state.dagger_updates == 2 and len(learner.rounds.labels) == 4


def test_a_non_finite_gradient_leaves_the_weights_as_they_were(monkeypatch):
    policy, samples = tiny_policy_and_samples([1.0] * 4)
    buffer = LabelBuffer(10)
    for s in samples:
        buffer.add(s.images, s.instructions, [EXPERT], s.task)
    untouched = copy.deepcopy(policy.state_dict())
    real = policy.evaluate
    monkeypatch.setattr(policy, "evaluate", lambda *a: (real(*a)[0] * float("nan"), None, None))
    metrics = dagger_round(policy, buffer, 2, 1e-2, 2, seed=0)
    assert metrics[M.DAGGER_LOSS] != metrics[M.DAGGER_LOSS]  # NaN: reported as it was
    assert all(torch.equal(v, untouched[k]) for k, v in policy.state_dict().items())


def test_a_learner_without_rounds_keeps_no_buffer(tmp_path, monkeypatch):
    policy, _ = tiny_policy_and_samples([1.0])
    assert _learner(tmp_path, monkeypatch, policy).rounds.labels is None


@pytest.mark.parametrize("changes, match", [
    ({"dagger_every": -1}, "dagger_every and dagger_sample must be >= 0"),
    ({"dagger_every": 2, "dagger_buffer": 0}, "dagger_buffer"),
    ({"dagger_every": 2, "dagger_sample": -1}, "dagger_sample"),
    ({"dagger_every": 2, "dagger_epochs": 0}, "dagger_epochs"),
    ({"dagger_every": 2, "dagger_lr": float("nan")}, "dagger_lr > 0"),
    ({"dagger_every": 2, "policy_kind": "lm"}, "the lm policy on 1 process"),
    ({"dagger_every": 2, "nproc_per_node": 2}, "on 2 process"),
])
def test_dagger_settings_it_cannot_honour_are_refused(changes, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig(**changes).validate()
    assert TrainConfig(dagger_every=2).validate().dagger_buffer == 8192


def test_rounds_need_labels_only_where_the_policy_can_learn_from_them():
    # a sample the trainer built without labels (no --expert-labels) adds nothing and the round is skipped
    policy, samples = tiny_policy_and_samples([1.0, 0.0])
    buffer = LabelBuffer(10)
    assert sum(buffer.add(s.images, s.instructions, s.experts, s.task) for s in samples) == 0
    assert len(buffer) == 0 and dagger_round(policy, buffer, 1, 1e-2, 4, seed=0) == {}
