"""Rejection-sampling fine-tuning (trainer.sft.rft): which successes a round takes, that the round
teaches the current weights what its successes did, and the config's refusals."""

from __future__ import annotations

import numpy as np
import pytest

from infra.runtime.config import ConfigError
from schemas.actions import Click
from schemas.blobs import BlobStore
from trainer.rl.config import TrainConfig
from trainer.sft.rft import annotator_of, select_rft, solved_tasks
from tests.fakes.clicks import make_episode, scored_trajectory


def centre(e):
    x0, y0, x1, y1 = e.target
    return Click(x=(x0 + x1) / 2 / 160, y=(y0 + y1) / 2 / 210)


def scored(store, rng, eid, policy, hit=True, ended=1.0e9, task="click-test"):
    e = make_episode("click-test", rng)
    st = scored_trajectory(e, centre(e) if hit else Click(x=0.01, y=0.99), 0.0, eid, policy, 0, store)
    traj = st.trajectory.model_copy(update={"ended_at": ended, "task": st.trajectory.task.model_copy(update={"name": task})})
    return st.model_copy(update={"trajectory": traj})


def test_a_round_takes_every_demonstration_and_the_newest_own_successes_per_task(tmp_path):
    store, rng = BlobStore(str(tmp_path)), np.random.default_rng(0)
    me = "pixel-run"
    demos = [scored(store, rng, f"d{k}", annotator_of(me)) for k in range(3)]
    own = [scored(store, rng, f"o{k}", me, ended=1.0e9 + k) for k in range(5)]
    other_task = [scored(store, rng, "t0", me, task="click-button")]
    rescored = own[0].model_copy(update={"scorer": "judge-v2"})  # a `flywheel rescore` copy of a success
    noise = [scored(store, rng, "x0", "another-policy"), scored(store, rng, "f0", me, hit=False),
             own[4].model_copy(deep=True)]  # another policy's success, a failure, a replayed copy
    chosen = select_rft(reversed(demos + own + other_task + noise + [rescored]), me, per_task=3)
    assert [s.episode_id for s in chosen] == ["t0", "d0", "d1", "d2", "o2", "o3", "o4"]
    assert [s.episode_id for s in select_rft(demos + own, me, per_task=2)] == ["d0", "d1", "o3", "o4"]  # demos capped too
    assert [s.episode_id for s in select_rft(demos + own, me, per_task=0)] == ["d0"]
    assert select_rft(noise[:2] + [rescored], me, per_task=10) == []
    # a task the policy already solves: its demonstrations only, none of its own successes
    solved = select_rft(demos + own + other_task, me, per_task=3, solved=frozenset({"click-test"}))
    assert [s.episode_id for s in solved] == ["t0", "d0", "d1", "d2"]


def test_solved_tasks_need_enough_recent_episodes_at_the_rate():
    outcomes = {"a": [1] * 19 + [0], "b": [1] * 19, "c": [1] * 18 + [0, 0], "d": [1] * 100}
    assert solved_tasks(outcomes, 0.95) == frozenset({"a", "d"})  # b: too few to say; c: 0.90
    assert solved_tasks(outcomes, 1.01) == frozenset()  # above 1: off


def test_fine_tuning_on_the_rounds_successes_raises_their_likelihood(tmp_path):
    import torch

    from infra.runtime.policy import PolicyInput, build_policy
    from trainer.sft.bc import examples
    from trainer.sft.rft import fine_tune

    store, rng = BlobStore(str(tmp_path)), np.random.default_rng(1)
    chosen = select_rft([scored(store, rng, f"o{k}", "p") for k in range(24)], "p", per_task=24)
    policy = build_policy("pixel", "p", {"grid": 8, "channels": [8, 16, 16], "seed": 0})
    data = examples(policy, chosen, store)
    policy.eval()
    with torch.no_grad():
        before = policy.evaluate(data.obs, data.instructions, data.actions)[0].mean()
    losses = fine_tune(policy, data, epochs=20, lr=1e-2, minibatch_size=8, seed=0)
    with torch.no_grad():
        after = policy.evaluate(data.obs, data.instructions, data.actions)[0].mean()
    assert not policy.training  # the trainer's mode is kept, whichever it was
    policy.train()
    fine_tune(policy, data, epochs=1, lr=1e-3, minibatch_size=8, seed=0)
    assert policy.training
    policy.eval()
    assert losses[-1] < losses[0] and after > before + 1.0, (before, after, losses)
    held_out = [make_episode("click-test", np.random.default_rng(7)) for _ in range(20)]
    hits = [e.reward(d.action.x, d.action.y) for e, d in
            zip(held_out, policy.act([PolicyInput(e.image, e.instruction, 160, 210) for e in held_out], greedy=True))]
    assert np.mean(hits) >= 0.5, hits  # random clicking on 8 x 8 cells hits about 1 time in 15


def test_step_inputs_are_preprocessed_once_across_rounds(tmp_path):
    import torch

    from infra.runtime.policy import build_policy
    from trainer.sft.bc import examples

    store, rng = BlobStore(str(tmp_path)), np.random.default_rng(2)
    records = [scored(store, rng, f"o{k}", "p") for k in range(4)]
    policy = build_policy("pixel", "p", {"grid": 8, "channels": [4, 8, 8]})
    calls = []
    step_inputs = policy.step_inputs
    policy.step_inputs = lambda t, s: calls.append(t.episode_id) or step_inputs(t, s)
    cache: dict = {}
    first = examples(policy, records[:3], store, cache)
    again = examples(policy, records[1:], store, cache)
    assert calls == ["o0", "o1", "o2", "o3"]  # o1 and o2 came from the cache
    assert sorted(cache) == ["o1", "o2", "o3"]  # only the latest call's episodes are kept
    torch.testing.assert_close(again.obs[:2], first.obs[1:])
    torch.testing.assert_close(again.obs, examples(policy, records[1:], store).obs)


@pytest.mark.parametrize("changes", [{"rft_every": 4, "policy_kind": "lm"}, {"rft_every": 4, "nproc_per_node": 2},
                                     {"rft_every": -1}, {"rft_every": 4, "rft_epochs": 0}, {"rft_lr": 0.0}])
def test_rft_settings_it_cannot_honour_are_refused(changes):
    with pytest.raises(ConfigError):
        TrainConfig(**changes).validate()
    TrainConfig(rft_every=4).validate()
