"""The PPO learner's typed state (trainer.rl.state.PPOState) and its collaborators, without Kafka:
a checkpoint the learner wrote while its own facts were an untyped ``extra`` dict loads as the
typed fields and resumes; the learner's updates move those fields as they did (value
pretraining's history, the version, the rounds' count, the tasks' outcomes); staleness is decided
on arrival and counted per batch."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from infra.runtime.checkpoint import TrainedIds, load_checkpoint, save_checkpoint
from infra.runtime.consume_loop import CheckpointFile
from schemas.actions import Click
from schemas.codec import encode
from streams.assemble import add_event
from streams.score import make_scorer
from tests.fakes.steps import episode_events
from tests.unit.ppo_learner import POLICY_CONFIG, click_batch, tiny_learner
from tests.unit.ppo_samples import tiny_policy_and_samples
from trainer.core.learner import LearnerState, write_weights
from trainer.rl import intake, streaming_ppo as stream
from trainer.rl.config import TrainConfig
from trainer.rl.kl_reference import anchor_version
from trainer.rl.state import PPOState
from trainer.rl.update import make_optimizer


LABELS = [Click(x=0.9, y=0.9)]  # each step's expert label (the DAgger rounds' data)

# A checkpoint as the learner wrote it before its state was typed (after a critic-only update and a
# PPO update with DAgger rounds on; the policy's config and the pending announcement trimmed), with
# the two fields only a KL penalty and RFT rounds add, and a NaN explained variance (JSON null).
UNTYPED = {
    "format": 1, "offsets": {"flywheel.rl.v1": {"0": 8}},
    "state": {"version": 1, "config": POLICY_CONFIG, "weights_file": "weights-2.pt", "updates": 2, "announce": None,
              "counts": {"stale_dropped": 0},
              "extra": {"vp_losses": [0.2029254287481308], "vp_evs": [None], "start_version": 0, "kind": "pixel",
                        "vp_started": 1796458298.9681287, "task_outcomes": {"click-test": [1, 0, 1, 0, 1, 0, 1, 0]},
                        "dagger_updates": 1, "kl_ref_version": 0, "ppo_updates": 3}},
    "trained": {"recent": {"u0-0": 0, "u1-3": 0}, "total": 8},
}


def test_a_checkpoint_of_the_untyped_learner_loads_as_the_typed_state(tmp_path):
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps(UNTYPED))
    state = load_checkpoint(path, PPOState).state
    assert (state.version, state.updates, state.kind, state.start_version, state.kl_ref_version) == (1, 2, "pixel", 0, 0)
    assert state.vp_losses == [0.2029254287481308] and math.isnan(state.vp_evs[0])  # null was a NaN
    assert state.vp_started == 1796458298.9681287 and state.task_outcomes == {"click-test": [1, 0] * 4}
    assert (state.ppo_updates, state.dagger_updates, state.counts) == (3, 1, {"stale_dropped": 0})
    view = stream.load_checkpoint(path)  # the plain view tools and tests read keeps the old keys
    assert view["kl_ref_version"] == 0 and view["ppo_updates"] == 3 and view["updates"] == 2
    assert view["offsets"] == {"flywheel.rl.v1": {0: 8}} and view["trained"]["total"] == 8
    # written again it is typed, and reads back the same (NaN included)
    save_checkpoint(path, load_checkpoint(path, PPOState))
    assert "extra" not in json.loads(path.read_text())["state"]
    again = load_checkpoint(path, PPOState).state
    assert again.model_dump(exclude={"vp_evs"}) == state.model_dump(exclude={"vp_evs"}) and math.isnan(again.vp_evs[0])


def test_the_oldest_checkpoints_fields_default_and_a_typo_is_refused():
    oldest = PPOState.model_validate({"version": 3, "config": {}, "weights_file": "w.pt", "extra": {}})
    assert oldest.kind is None and oldest.start_version == 0 and oldest.kl_ref_version is None
    assert oldest.vp_started is None and oldest.vp_losses == [] and oldest.ppo_updates == 0
    with pytest.raises(ValidationError, match="vp_loss"):
        PPOState.model_validate({"version": 3, "config": {}, "weights_file": "w.pt", "extra": {"vp_loss": [1.0]}})
    # another learner's (SFT / CT) checkpoint kept an empty extra: it loads as every learner's fields
    assert LearnerState.model_validate({"version": 1, "config": {}, "weights_file": "w.pt", "extra": {}}).version == 1
    with pytest.raises(ValidationError):
        LearnerState.model_validate({"version": 1, "config": {}, "weights_file": "w.pt", "extra": {"kind": "lm"}})


def test_a_resumed_untyped_checkpoint_goes_on_where_it_stopped(tmp_path, monkeypatch):
    folder = tmp_path / "ckpt"
    policy, _ = tiny_policy_and_samples([1.0])
    write_weights(folder, 2, policy, make_optimizer(policy, 1e-4))
    (folder / "checkpoint.json").write_text(json.dumps({**UNTYPED, "offsets": {}, "trained": {"recent": {}, "total": 8}}))
    ckpt = CheckpointFile(folder / "checkpoint.json", PPOState)
    learner = tiny_learner(tmp_path, monkeypatch, ckpt, value_pretrain_max_batches=2, dagger_every=2)
    assert learner.policy.version == 1 and learner.policy.kind == "pixel"
    learner.intake.pool = click_batch("a", LABELS)
    learner.flush(None)  # the second critic-only batch: the phase had one
    assert learner.state.version == 1 and len(learner.state.vp_losses) == 2 and learner.state.dagger_updates == 1
    learner.intake.pool = click_batch("b", LABELS)
    learner.flush(None)  # a PPO update, the 2nd with rounds on: a DAgger round
    state = learner.state
    assert state.version == 2 and state.updates == 4 and state.dagger_updates == 2 and state.announce["version"] == 2
    assert learner.metrics["batch/dagger_steps"] == 8  # both batches' labels, aggregated since the restart
    assert state.task_outcomes["click-test"] == [1, 0] * 8 and state.vp_started == 1796458298.9681287
    ckpt.save()
    assert load_checkpoint(ckpt.path, PPOState).state == state


def test_a_fresh_learner_checkpoints_value_pretraining_then_a_version(tmp_path, monkeypatch):
    ckpt = CheckpointFile(tmp_path / "ckpt" / "checkpoint.json", PPOState)
    learner = tiny_learner(tmp_path, monkeypatch, ckpt, value_pretrain_max_batches=1)
    assert learner.state.kind == "pixel" and learner.state.start_version == 0 and learner.state.announce["version"] == 0
    learner.flush(None)  # an empty pool: nothing trained, the stale total reads 0
    assert learner.state.updates == 0 and learner.counts == {"stale_dropped": 0}
    learner.intake.pool = click_batch("a", LABELS)
    learner.flush(None)
    assert learner.state.version == 0 and len(learner.state.vp_losses) == 1 and learner.state.vp_started is not None
    learner.intake.pool = click_batch("b", LABELS)
    learner.flush(None)
    assert learner.state.version == 1 and len(learner.state.vp_losses) == 1 and learner.state.updates == 2
    assert learner.ckpt.checkpoint.trained.total == 8 and "stream/trained_total" in learner.metrics


class Record:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def value(self) -> bytes:
        return self._value


def _scored(episode_id: str) -> Record:
    state = None
    for ev in episode_events(episode_id, 2):
        state, traj = add_event(state, ev, 0.0)
    return Record(encode(make_scorer("rule-v1").score(traj, 1.0).model_copy(update={"rl_eligible": True})))


def test_staleness_is_decided_on_arrival_and_counted_per_batch(monkeypatch):
    monkeypatch.setattr(intake, "to_episode", lambda s, policy, store: SimpleNamespace(
        episode_id=s.episode_id, policy_version=s.trajectory.policy_versions[0], actions=[None]))
    fates: list[str] = []
    policy = SimpleNamespace(version=4)  # the episodes were produced by v0
    pool = intake.Intake(TrainConfig(policy_name="pixel-ppo"), 4, None, policy, lambda f: fates.append(f) or 0)
    trained = TrainedIds()
    pool.add(_scored("fresh"), None, trained)  # 4 versions behind: the bound itself, trainable
    policy.version = 5
    pool.add(_scored("stale"), None, trained)
    assert fates == ["stale_dropped"] and [e.episode_id for e in pool.pool] == ["fresh"]
    batch, dropped = pool.take()
    assert [e.episode_id for e in batch] == ["fresh"] and dropped == 1 and pool.lags(batch) == [5]
    pool.add(_scored("stale-2"), None, trained)
    assert pool.take() == ([], 1) == pool.take()  # nothing to train: the drop waits for the next batch
    pool.mark_trained(batch, trained)  # remembered only while a copy could still be trained
    assert "fresh" not in trained and trained.total == 1


def test_the_kl_anchor_is_fixed_in_the_state_at_its_first_use_unless_configured():
    state = PPOState(version=7, config={}, weights_file="w.pt", start_version=3)
    assert anchor_version(TrainConfig(kl_ref_version=5), state) == 5 and state.kl_ref_version is None
    assert anchor_version(TrainConfig(), state) == 3 and state.kl_ref_version == 3  # where this trainer started
    state.start_version = 6  # however the state changes later, a restart keeps the anchor
    assert anchor_version(TrainConfig(), state) == 3
