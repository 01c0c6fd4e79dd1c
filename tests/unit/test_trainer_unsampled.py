"""The PPO trainer's intake never pools a trajectory with an unsampled step (a ``--greedy``
worker's argmax, a scripted demonstration), even one a scorer marked RL-eligible: its
log-probs are no behaviour probabilities to weight by. No Kafka: the learner's ``add`` is fed
records directly."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from infra.runtime.consume_loop import CheckpointFile
from infra.runtime.settings import load_settings
from schemas.codec import encode
from streams.assemble import add_event
from streams.score import make_scorer
from tests.fakes.steps import episode_events
from trainer.rl import intake, streaming_ppo as stream
from trainer.rl.config import TrainConfig
from trainer.rl.state import PPOState


class Record:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def value(self) -> bytes:
        return self._value


def scored(episode_id: str, greedy_step: int | None):
    state = None
    for ev in episode_events(episode_id, 3):
        state, traj = add_event(state, ev, 0.0)
    if greedy_step is not None:
        steps = list(traj.steps)
        steps[greedy_step] = steps[greedy_step].model_copy(update={"sampled": False})
        traj = traj.model_copy(update={"steps": steps})
    # as a scorer that does not know of Step.sampled would send it: marked eligible
    return make_scorer("rule-v1").score(traj, 1.0).model_copy(update={"rl_eligible": True})


def test_a_trajectory_with_an_unsampled_step_is_skipped_and_counted(monkeypatch, tmp_path):
    monkeypatch.setattr(stream, "make_producer", lambda settings: None)  # nothing is sent here
    monkeypatch.setattr(intake, "to_episode", lambda s, policy, store: SimpleNamespace(episode_id=s.episode_id))
    ckpt = CheckpointFile(tmp_path / "ckpt.json", PPOState)
    ckpt.checkpoint.state = PPOState(version=0, config={}, weights_file="w.pt")
    learner = stream.PPOLearner(TrainConfig(policy_name="pixel-ppo"), load_settings({"data_dir": str(tmp_path)}),
                                None, ckpt, SimpleNamespace(version=0), None, threading.Event(), None, "run")
    for episode_id, greedy_step in (("ep-sampled", None), ("ep-greedy", 1), ("ep-greedy-first", 0)):
        learner.add(Record(encode(scored(episode_id, greedy_step))), dlq=None)
    assert [e.episode_id for e in learner.intake.pool] == ["ep-sampled"]
    assert learner.counts == {"skipped_unsampled": 2}
    other = scored("ep-other", None)
    other = other.model_copy(update={"trajectory": other.trajectory.model_copy(update={"policy": "someone-else"})})
    for record in (other, scored("ep-ineligible", None).model_copy(update={"rl_eligible": False})):
        learner.add(Record(encode(record)), dlq=None)
    assert learner.counts == {"skipped_unsampled": 2, "skipped_other_policy": 1, "skipped_not_eligible": 1}
    assert len(learner.intake.pool) == 1
