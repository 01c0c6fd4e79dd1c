"""Self-imitation (trainer.rl.self_imitation, trainer.rl.sil_replay): the replay keeps per task the
newest successes, then the best returns, within its bounds; SIL's loss pulls only where the
return beat the value; a PPO update with it raises a replayed success's action; the entropy band
moves the coefficient and the learner's checkpoint keeps it across a restart; the replay is seeded
from the policy's own successes on the sft topic (not from the checkpoint)."""

from __future__ import annotations

import copy

import pytest
import torch

from infra.runtime.checkpoint import load_checkpoint
from infra.runtime.config import ConfigError
from infra.runtime.consume_loop import CheckpointFile
from schemas.actions import Click
from streams.assemble import add_event
from streams.score import make_scorer
from tests.fakes.steps import episode_events
from tests.unit.ppo_learner import click_batch, tiny_learner
from tests.unit.ppo_samples import tiny_policy_and_samples
from trainer.core import metric_names as M
from trainer.rl import intake, sil_replay
from trainer.sft import bc
from trainer.rl.config import TrainConfig
from trainer.rl.self_imitation import ENT_RAISE, SILSample, adapt_ent_coef, returns_to_go, sil_loss
from trainer.rl.sil_replay import SuccessReplay
from trainer.rl.state import PPOState
from trainer.rl.update import EpisodeSample, collate, ppo_update

REPLAYED = Click(x=0.9, y=0.9)  # a corner cell of the 4 x 4 grid: no sample's own action there


def _episode(name: str, task: str, rewards: list[float], success: bool) -> EpisodeSample:
    n = len(rewards)
    return EpisodeSample(name, [torch.zeros(1)] * n, ["do it"] * n, [REPLAYED] * n, [0.0] * n, rewards, 0,
                         task=task, success=success)


def test_returns_to_go_discount_each_steps_future():
    assert returns_to_go([0.0, 0.0, 1.0], 1.0) == [1.0, 1.0, 1.0]
    assert returns_to_go([1.0, 0.0, 2.0], 0.5) == pytest.approx([1.5, 1.0, 2.0])


def test_the_replay_keeps_the_newest_successes_then_the_best_returns_per_task():
    replay = SuccessReplay(per_task=2, max_steps=100, gamma=1.0)
    assert replay.add([_episode("a0", "a", [1.0], True), _episode("a-fail", "a", [0.0], False),
                       _episode("a1", "a", [1.0], True)]) == 2  # a failure with no return never enters
    assert replay.add([_episode("a2", "a", [0.5], True)]) == 1
    assert [k.returns for k in replay.tasks["a"]] == [[0.5], [1.0]]  # a2 and a1: the newest two, whatever the return
    assert replay.add([_episode("b-low", "b", [0.1, 0.1], False), _episode("b-high", "b", [0.3, 0.6], False),
                       _episode("b-mid", "b", [0.5], False)]) == 2
    assert [k.episode_return for k in replay.tasks["b"]] == pytest.approx([0.9, 0.5])
    assert replay.add([_episode("b-won", "b", [0.2], True)]) == 1  # a success ranks above any return
    assert [(k.success, k.episode_return) for k in replay.tasks["b"]] == [(True, 0.2), (False, pytest.approx(0.9))]
    assert replay.episodes() == 4 and replay.steps() == 5


def test_the_replay_stays_within_its_steps_and_the_largest_task_gives_way():
    replay = SuccessReplay(per_task=8, max_steps=7, gamma=1.0)
    replay.add([_episode("s0", "short", [1.0], True), _episode("l0", "long", [0.0, 0.0, 1.0], True)])
    replay.add([_episode("l1", "long", [0.0, 0.0, 1.0], True)])
    assert replay.steps() == 7
    assert replay.add([_episode("l2", "long", [0.0, 1.0], True)]) == 1  # 9 steps: "long" holds the most, drops its oldest
    assert replay.steps() == 6 and replay.episodes() == 3
    assert [len(k.actions) for k in replay.tasks["long"]] == [2, 3] and len(replay.tasks["short"]) == 1


def test_sampling_prefers_steps_whose_return_still_beats_the_value():
    replay = SuccessReplay(per_task=8, max_steps=100, gamma=1.0)
    replay.add([_episode("x", "a", [1.0], True), _episode("y", "b", [1.0], True)])
    first = replay.sample(64, torch.Generator().manual_seed(0))
    assert len(first.actions) == 64 and first.replay_steps == 2 and first.replay_episodes == 2
    learnt = {key for key, _ in first.keys if key == replay.tasks["a"][0].key}
    first.clipped[:] = torch.tensor([0.0 if key in learnt else 1.0 for key, _ in first.keys])
    replay.reprioritise(first)
    again = replay.sample(1000, torch.Generator().manual_seed(1))
    share = sum(key in learnt for key, _ in again.keys) / 1000
    assert 0.005 < share < 0.1  # (0.01 / 1.01) ** 0.6 against 1: still drawn now and then
    assert replay.sample(4) is not None and SuccessReplay(2, 10, 1.0).sample(4) is None


def test_sil_loss_is_zero_where_the_return_does_not_beat_the_value():
    logprob = torch.tensor([-1.0, -2.0], requires_grad=True)
    value = torch.tensor([1.0, 0.5], requires_grad=True)
    loss, clipped = sil_loss(logprob, value, torch.tensor([0.5, 0.5]), beta=0.1)
    loss.backward()
    assert float(loss.detach()) == 0.0 and clipped.tolist() == [0.0, 0.0]
    assert logprob.grad.tolist() == [0.0, 0.0] and value.grad.tolist() == [0.0, 0.0]


def test_sil_loss_pulls_the_action_and_the_value_up_where_the_return_beats_the_value():
    logprob = torch.tensor([-1.0, -2.0], requires_grad=True)
    value = torch.tensor([0.25, 2.0], requires_grad=True)
    loss, clipped = sil_loss(logprob, value, torch.tensor([1.0, 1.0]), beta=0.1)
    loss.backward()
    assert clipped.tolist() == [0.75, 0.0]
    assert float(loss.detach()) == pytest.approx(-(-1.0 * 0.75) / 2 + 0.5 * 0.1 * 0.75 ** 2 / 2)
    assert logprob.grad[0] < 0 and value.grad[0] < 0  # gradient descent raises both
    assert logprob.grad[1] == 0 and value.grad[1] == 0


def _replayed_logprob(policy, samples) -> float:
    """The mean log-prob of the replayed action on the samples' screens."""
    with torch.no_grad():
        images = torch.stack([s.images[0] for s in samples])
        return float(policy.evaluate(images, [s.instructions[0] for s in samples], [REPLAYED] * len(samples))[0].mean())


def _sil_update(policy, batch, sil: SILSample, sil_coef: float):
    policy = copy.deepcopy(policy)
    cfg = TrainConfig(sil_coef=sil_coef, tis_cap=0.0, ent_coef=0.0, epochs=8, minibatch_size=4, lr=1e-2)
    torch.manual_seed(1)
    metrics = ppo_update(policy, torch.optim.Adam(policy.parameters(), lr=cfg.lr), batch, cfg, sil=copy.deepcopy(sil))
    return policy, metrics


def test_a_ppo_update_with_self_imitation_raises_a_replayed_successes_action():
    # equal returns: PPO pulls nowhere, and the critic learns V = 1 (at 0 the tiny policy's critic
    # kills its features, and its location head with them); the replayed episodes returned 2
    policy, samples = tiny_policy_and_samples([1.0] * 6)
    won = samples[::2]
    replay = SuccessReplay(per_task=4, max_steps=100, gamma=1.0)
    replay.add([EpisodeSample(f"won{k}", s.images, s.instructions, [REPLAYED], [0.0], [2.0], 0, task="t", success=True)
                for k, s in enumerate(won)])
    sil = replay.sample(8, torch.Generator().manual_seed(0))
    batch = collate(samples)
    before = _replayed_logprob(policy, won)
    free, free_metrics = _sil_update(policy, batch, sil, 0.0)
    taught, metrics = _sil_update(policy, batch, sil, 1.0)
    assert abs(_replayed_logprob(free, won) - before) < 0.05
    assert _replayed_logprob(taught, won) > before + 0.5
    assert metrics[M.SIL_STEPS] == 8 and metrics[M.SIL_REPLAY_STEPS] == 3 and metrics[M.SIL_LOSS] > 0
    assert 0 < metrics[M.SIL_ADVANTAGE] <= 2.0
    assert {M.SIL_LOSS, M.SIL_STEPS, M.SIL_REPLAY_STEPS, M.SIL_REPLAY_EPISODES, M.SIL_ADVANTAGE} <= set(free_metrics)


def test_the_entropy_band_raises_the_coefficient_below_the_floor_and_returns_it_above_the_ceiling():
    assert adapt_ent_coef(0.003, 0.1, 0.003, 0.5, 1.0) == pytest.approx(0.003 * ENT_RAISE)
    assert adapt_ent_coef(0.0, 0.1, 0.0, 0.5, 1.0) > 0  # a configured 0 is raised too
    assert adapt_ent_coef(0.09, 0.1, 0.003, 0.5, 1.0) == pytest.approx(0.1)  # capped
    assert adapt_ent_coef(0.009, 0.7, 0.003, 0.5, 1.0) == 0.009  # inside the band: kept
    assert adapt_ent_coef(0.009, 2.0, 0.003, 0.5, 1.0) == pytest.approx(0.006)
    assert adapt_ent_coef(0.004, 2.0, 0.003, 0.5, 1.0) == 0.003  # never below the configured one
    assert adapt_ent_coef(0.003, 0.1, 0.003, 0.0, 0.0) == 0.003  # off
    assert TrainConfig(ent_floor=0.5).band_ceiling() == 1.0 and TrainConfig(ent_floor=0.5, ent_ceiling=3).band_ceiling() == 3


@pytest.mark.parametrize("changes", [{"sil_coef": -0.1}, {"sil_coef": float("nan")}, {"sil_batch": 0},
                                     {"sil_per_task": 0}, {"ent_floor": 0.5, "ent_ceiling": 0.4},
                                     {"sil_coef": 0.1, "nproc_per_node": 2}, {"ent_floor": 0.5, "nproc_per_node": 2}])
def test_bad_self_imitation_settings_are_refused(changes):
    with pytest.raises(ConfigError):
        TrainConfig(**changes).validate()


def test_the_learner_replays_successes_and_a_restart_keeps_the_coefficient_not_the_replay_itself(tmp_path, monkeypatch):
    ckpt = CheckpointFile(tmp_path / "ckpt" / "checkpoint.json", PPOState)
    settings = dict(sil_coef=0.5, sil_batch=6, ent_coef=0.002, ent_floor=50.0)  # a floor above any entropy
    learner = tiny_learner(tmp_path, monkeypatch, ckpt, **settings)
    learner.intake.pool = click_batch("a")
    learner.flush(None)
    assert learner.self_imitation.replay.episodes() == 2  # the batch's two successes, replayed at once
    assert learner.metrics[M.SIL_STEPS] == 6 and learner.metrics[M.ENT_COEF] == 0.002
    assert learner.state.ent_coef == pytest.approx(0.002 * ENT_RAISE)
    ckpt.save()
    assert load_checkpoint(ckpt.path, PPOState).state.ent_coef == pytest.approx(0.002 * ENT_RAISE)
    again = tiny_learner(tmp_path, monkeypatch, CheckpointFile(ckpt.path, PPOState), **settings)
    assert again.state.ent_coef == pytest.approx(0.002 * ENT_RAISE) and again.self_imitation.replay.episodes() == 0
    again.intake.pool = click_batch("b")
    again.flush(None)
    assert again.metrics[M.ENT_COEF] == pytest.approx(0.002 * ENT_RAISE)  # the update used the kept coefficient
    assert again.state.ent_coef == pytest.approx(0.002 * ENT_RAISE ** 2)


def test_an_old_checkpoint_has_no_adapted_coefficient_and_a_learner_without_the_band_keeps_none(tmp_path, monkeypatch):
    assert PPOState.model_validate({"version": 3, "config": {}, "weights_file": "w.pt", "extra": {}}).ent_coef is None
    learner = tiny_learner(tmp_path, monkeypatch, CheckpointFile(tmp_path / "c" / "checkpoint.json", PPOState))
    learner.intake.pool = click_batch("a")
    learner.flush(None)
    assert learner.self_imitation.replay is None and M.SIL_STEPS not in learner.metrics
    assert learner.state.ent_coef is None and learner.metrics[M.ENT_COEF] == TrainConfig().ent_coef


def _on_sft(episode_id: str, policy: str):
    """A successful one-step episode of ``policy`` as flywheel.sft.v1 holds it."""
    state = None
    for ev in episode_events(episode_id, 1):
        state, traj = add_event(state, ev, 0.0)
    return make_scorer("rule-v1").score(traj.model_copy(update={"policy": policy}), 1.0)


def test_the_replay_is_seeded_with_the_policys_own_successes_on_the_sft_topic(tmp_path, monkeypatch):
    _, samples = tiny_policy_and_samples([1.0])
    monkeypatch.setattr(sil_replay, "to_episode", lambda scored, policy, store: EpisodeSample(
        scored.episode_id, samples[0].images, samples[0].instructions, [REPLAYED], [0.0], [1.0], 0,
        task=scored.trajectory.task.name, success=scored.trajectory.success))
    sft = [_on_sft("mine", "p"), _on_sft("taught", "scripted-p"), _on_sft("other", "q")]
    assert all(s.verdict == 1 for s in sft)
    learner = tiny_learner(tmp_path, monkeypatch, CheckpointFile(tmp_path / "c" / "checkpoint.json", PPOState), sft,
                       sil_coef=0.5)
    learner.intake.pool = [s for s in click_batch("a") if not s.success]  # nothing of its own to add
    learner.flush(None)
    assert [k.key for kept in learner.self_imitation.replay.tasks.values() for k in kept] == [0]  # "mine" alone
    assert learner.metrics[M.SIL_REPLAY_EPISODES] == 1 and learner.self_imitation.seed is None


def test_a_seed_that_fails_leaves_the_replay_to_the_batches(tmp_path, monkeypatch):
    learner = tiny_learner(tmp_path, monkeypatch, CheckpointFile(tmp_path / "c" / "checkpoint.json", PPOState), sil_coef=0.5)
    monkeypatch.setattr(bc, "read_sft", lambda settings, stage, timeout_s: 1 / 0)
    learner.intake.pool = click_batch("a")
    learner.flush(None)
    assert learner.self_imitation.replay.episodes() == 2 and learner.state.version == 1


class _Judge:
    def __init__(self, score: float) -> None:
        self.score = score

    def judge(self, traj):
        return self.score


def _judged(page_success: bool, judge_score: float):
    """A one-step episode the page calls ``page_success``, scored where the judge decides its task."""
    state = None
    for ev in episode_events("ep-judged", 1, success=page_success):
        state, traj = add_event(state, ev, 0.0)
    return make_scorer("rule-v1", _Judge(judge_score), frozenset({traj.task.name})).score(traj, 1.0)


@pytest.mark.parametrize("page_success, judge_score, learnt", [(True, 0.1, False), (False, 0.9, True)])
def test_where_the_judge_decides_the_replay_learns_its_verdict_not_the_pages(page_success, judge_score, learnt):
    """RL on a verifier's reward (issue 59) must not learn from the page's label: the success that
    admits an episode to self-imitation's replay (and RFT's per-task window) is the judge's."""
    scored = _judged(page_success, judge_score)
    assert scored.trajectory.success == page_success  # the page's verdict stays, to measure against
    policy = type("P", (), {"kind": "pixel", "can_represent": lambda self, a, *x: True,
                            "step_inputs": lambda self, traj, store: [torch.zeros(1)] * len(traj.steps),
                            "bootstrap_input": lambda self, traj, store: None})()
    episode = intake.to_episode(scored, policy, None)
    assert episode.success is learnt
    replay = SuccessReplay(per_task=4, max_steps=64, gamma=0.99)
    assert replay.add([episode]) == int(learnt)


def test_a_restart_with_the_band_off_trains_with_the_configured_coefficient(tmp_path, monkeypatch):
    """The adapted coefficient is the band's: a checkpoint that holds one, resumed with the band
    off (--ent-floor 0, or --sil-coef 0 from the demo), trains with the configured ent_coef."""
    ckpt = CheckpointFile(tmp_path / "ckpt" / "checkpoint.json", PPOState)
    learner = tiny_learner(tmp_path, monkeypatch, ckpt, sil_coef=0.5, ent_coef=0.002, ent_floor=50.0)
    learner.intake.pool = click_batch("a")
    learner.flush(None)
    ckpt.save()
    off = tiny_learner(tmp_path, monkeypatch, CheckpointFile(ckpt.path, PPOState), ent_coef=0.002)
    off.intake.pool = click_batch("b")
    off.flush(None)
    assert off.metrics[M.ENT_COEF] == 0.002
