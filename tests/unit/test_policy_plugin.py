"""A policy kind is a plug-in: a third kind, registered here only, runs behaviour cloning and a PPO
update through the unchanged trainers (trainer.sft.bc, trainer.rl.intake.to_episode,
trainer.rl.update), publishes a version a rollout worker then acts with, and the app reads its
facts through the registry."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from infra.runtime.config import ConfigError
from infra.runtime.errors import UserError
from infra.runtime.policy import KINDS, Decision, build_policy, kind_names, policy_kind, register_kind
from schemas.actions import Click
from schemas.blobs import BlobStore
from schemas.codec import decode, encode
from schemas.events import Observation, PolicyVersion, TaskSpec
from producers.policy_client import PolicyRequest, make_client
from producers.sandboxes.base import Obs
from trainer.core import metric_names as M
from trainer.core.publish import make_version, save_weights
from trainer.policies.base import KindDefaults, PolicyDefaults
from trainer.rl.config import TrainConfig, check_device
from trainer.rl.intake import to_episode
from trainer.rl.update import collate, make_optimizer, ppo_update
from trainer.sft.bc_config import BCConfig
from tests.fakes.clicks import make_episode, scored_trajectory

SIDE, GRID = 16, 4  # a 16 x 16 grey screenshot; clicks on a 4 x 4 grid of cells


class TinyPolicy(nn.Module, PolicyDefaults):
    """A linear click policy over a downscaled screenshot: one logit per cell, one value."""

    kind = "tiny"

    def __init__(self, name: str, config: dict | None = None) -> None:
        super().__init__()
        self.name, self.version, self.cfg = name, 0, {"seed": 0, **(config or {})}
        torch.manual_seed(int(self.cfg["seed"]))
        self.cells = nn.Linear(SIDE * SIDE, GRID * GRID)
        self.value_head = nn.Linear(SIDE * SIDE, 1)
        nn.init.zeros_(self.cells.weight)
        nn.init.zeros_(self.cells.bias)

    def config_dict(self) -> dict:
        return dict(self.cfg)

    def can_represent(self, action, instruction=None) -> bool:
        return isinstance(action, Click)

    def _screen(self, image: np.ndarray) -> torch.Tensor:
        grey = Image.fromarray(np.asarray(image, dtype=np.uint8)).convert("L").resize((SIDE, SIDE))
        return torch.from_numpy(np.asarray(grey, dtype=np.float32) / 255.0).flatten()

    def step_inputs(self, traj, store) -> list[torch.Tensor]:
        for step in traj.steps:
            if not self.can_represent(step.action):
                raise ValueError(f"step {step.step_index}: the tiny policy clicks only")
        return [self._screen(np.asarray(Image.open(io.BytesIO(store.get(s.observation.screenshot.sha256)))))
                for s in traj.steps]

    def _cell(self, action) -> int:
        col, row = min(int(action.x * GRID), GRID - 1), min(int(action.y * GRID), GRID - 1)
        return row * GRID + col

    def evaluate(self, inputs, instructions, actions):
        logp = F.log_softmax(self.cells(inputs), -1)
        cells = torch.tensor([self._cell(a) for a in actions])
        entropy = -(logp.exp() * logp).sum(-1)
        return logp[torch.arange(len(actions)), cells], self.value_head(inputs).squeeze(-1), entropy

    @torch.no_grad()
    def act(self, inputs, greedy: bool = False) -> list[Decision]:
        obs = torch.stack([self._screen(i.image) for i in inputs])
        logits = self.cells(obs)
        cells = logits.argmax(-1) if greedy else torch.distributions.Categorical(logits=logits).sample()
        logp = F.log_softmax(logits, -1)
        return [Decision(action=Click(x=(int(c) % GRID + 0.5) / GRID, y=(int(c) // GRID + 0.5) / GRID),
                         logprob=float(logp[k, c])) for k, c in enumerate(cells)]


class TinyKind(KindDefaults):
    name = "tiny"

    def build(self, name, config):
        return TinyPolicy(name, config)


@pytest.fixture
def tiny():
    kind = register_kind(TinyKind())
    yield kind
    KINDS.pop(kind.name, None)


def target_click(episode) -> Click:
    x0, y0, x1, y1 = episode.target
    return Click(x=(x0 + x1) / 2 / 160, y=(y0 + y1) / 2 / 210)


def test_a_registered_kind_is_found_by_name_and_its_facts_come_from_the_registry(tiny):
    assert "tiny" in kind_names() and policy_kind("tiny") is tiny
    assert {"pixel", "lm"} <= set(kind_names())  # the installed kinds, through the entry points
    assert isinstance(build_policy("tiny", "t", {"seed": 3}), TinyPolicy)
    assert BCConfig(policy_kind="tiny", epochs=0).epochs_for("tiny") == tiny.bc_epochs
    assert TrainConfig(policy_kind="tiny", pretrained="smollm2-135m").policy_overrides() == {"seed": 0}
    with pytest.raises(ConfigError, match="the tiny policy runs on the CPU only"):
        check_device("cuda", "tiny", "flywheel train")


def test_bc_raises_the_likelihood_of_the_demonstrated_clicks(tiny, tmp_path):
    store, rng = BlobStore(str(tmp_path)), np.random.default_rng(0)
    demos = []
    for k in range(16):
        e = make_episode("click-test", rng)
        demos.append(scored_trajectory(e, target_click(e), 0.0, f"d{k}", "scripted-t", 0, store))
    cfg = BCConfig(policy_kind="tiny", epochs=30, lr=0.05, minibatch_size=8)
    policy = build_policy("tiny", "t", cfg.policy_overrides())
    inputs = torch.stack([x for d in demos for x in policy.step_inputs(d.trajectory, store)])
    clicks = [d.trajectory.steps[0].action for d in demos]
    with torch.no_grad():
        before = policy.evaluate(inputs, [""] * len(clicks), clicks)[0].mean()
    out = policy_kind("tiny").clone(policy, demos, store, cfg)  # `flywheel bc`'s training step, the generic one
    with torch.no_grad():
        after = policy.evaluate(inputs, [""] * len(clicks), clicks)[0].mean()
    assert float(after) > float(before) + 0.5
    assert len(out.losses) == 30 and out.losses[-1] < out.losses[0]
    assert out.metrics[M.BC_LOSS] == out.losses[-1] and out.metrics[M.STEPS] == 16.0
    assert out.train_match == {}  # the kind checks no greedy match


def test_a_ppo_update_moves_log_probs_in_the_advantages_direction(tiny, tmp_path):
    store, rng = BlobStore(str(tmp_path)), np.random.default_rng(1)
    policy = build_policy("tiny", "t", {"seed": 0})
    uniform = -float(np.log(GRID * GRID))  # the behaviour log-prob of every click under the zero-initialised head
    miss = Click(x=0.02, y=0.98)  # a corner cell no button of these episodes covers
    episodes = []
    while len(episodes) < 24:
        e = make_episode("click-test", rng)
        if policy._cell(target_click(e)) == policy._cell(miss):
            continue
        click = target_click(e) if len(episodes) % 2 == 0 else miss
        episodes.append(to_episode(scored_trajectory(e, click, uniform, f"e{len(episodes)}", "t", 0, store),
                                   policy, store))
    assert [e.rewards[-1] for e in episodes[:2]] == [1.0, 0.0]
    batch = collate(episodes)
    cfg = TrainConfig(policy_kind="tiny", lr=0.005, epochs=2, minibatch_size=8, ent_coef=0.0).validate()
    with torch.no_grad():
        before = policy.evaluate(batch.images, batch.instructions, batch.actions)[0]
    metrics = ppo_update(policy, make_optimizer(policy, cfg.lr, cfg.head_lr_mult), batch, cfg)
    with torch.no_grad():
        after = policy.evaluate(batch.images, batch.instructions, batch.actions)[0]
    moved = after - before
    rewarded = batch.rewards[:, 0] > 0
    assert float(moved[rewarded].mean()) > 0.05 > -0.05 > float(moved[~rewarded].mean())
    assert metrics[M.EPISODES] == 24.0


@pytest.mark.parametrize("suite,cut_short", [("miniwob", False), ("games", True)])
def test_only_a_game_that_ran_out_is_bootstrapped(tiny, tmp_path, suite, cut_short):
    """A task judged at its end that ran out of steps failed it (terminal); a game the budget
    stopped is cut short and GAE bootstraps from its last state."""
    store, rng = BlobStore(str(tmp_path)), np.random.default_rng(2)
    policy = build_policy("tiny", "t", {"seed": 0})
    e = make_episode("click-test", rng)
    scored = scored_trajectory(e, target_click(e), -1.0, "e0", "t", 0, store)
    traj = scored.trajectory
    update = {"end_reason": "step_budget", "task": traj.task.model_copy(update={"suite": suite})}
    if suite == "games":
        update |= {"score": 3.0, "normalised_score": 0.3}
    scored = scored.model_copy(update={"trajectory": traj.model_copy(update=update)})
    sample = to_episode(scored, policy, store)
    assert sample.truncated is cut_short
    assert to_episode(scored.model_copy(update={"trajectory": traj}), policy, store).truncated is False  # ended by done


def test_approx_kl_measures_the_update_not_the_behaviour_policys_lag(tiny, tmp_path):
    """One epoch over one minibatch evaluates the policy before it steps: it has not moved, so the
    KL is 0 however far the behaviour policy that acted was (log-probs of -12 against a uniform -2.8)."""
    store, rng = BlobStore(str(tmp_path)), np.random.default_rng(3)
    policy = build_policy("tiny", "t", {"seed": 0})
    episodes = [to_episode(scored_trajectory(e, target_click(e), -12.0, f"e{k}", "t", 0, store), policy, store)
                for k, e in enumerate(make_episode("click-test", rng) for _ in range(8))]
    cfg = TrainConfig(policy_kind="tiny", lr=0.005, epochs=1, minibatch_size=64).validate()
    assert cfg.tis_cap > 0  # decoupled: PPO clips around the proximal policy
    metrics = ppo_update(policy, make_optimizer(policy, cfg.lr, cfg.head_lr_mult), collate(episodes), cfg)
    assert metrics[M.APPROX_KL] == pytest.approx(0.0, abs=1e-6)


def test_to_episode_keeps_the_expert_labels_the_policy_can_represent(tiny, tmp_path):
    from schemas.actions import Hotkey

    store, rng = BlobStore(str(tmp_path)), np.random.default_rng(4)
    policy = build_policy("tiny", "t", {"seed": 0})
    e = make_episode("click-test", rng)
    scored = scored_trajectory(e, target_click(e), -1.0, "e0", "t", 0, store)
    assert to_episode(scored, policy, store).experts == [None]  # a step without a label
    traj = scored.trajectory
    for label, kept in ((target_click(e), target_click(e)), (Hotkey(key="tab"), None)):  # no key on this policy
        steps = [traj.steps[0].model_copy(update={"expert_action": label})]
        relabelled = scored.model_copy(update={"trajectory": traj.model_copy(update={"steps": steps})})
        assert to_episode(relabelled, policy, store).experts == [kept]


def test_a_registered_kind_publishes_a_version_a_rollout_worker_acts_with(tiny, tmp_path):
    """The version travels the policy topic's codec under the kind's own name, and the rollout's
    torch client loads it (sha256 checked) and acts with its weights."""
    store = BlobStore(str(tmp_path))
    policy = build_policy("tiny", "t", {"seed": 1})
    with torch.no_grad():
        policy.cells.bias[GRID + 2] = 50.0  # the published weights click the cell (2, 1); the fresh ones anywhere
    policy.version = 3
    pv = decode(encode(make_version(policy, save_weights(policy, store), parent=2)), PolicyVersion)
    assert (pv.kind, pv.version, pv.config) == ("tiny", 3, {"seed": 1})

    screen = Observation(screenshot=store.put(b"png", "image/png"), screen_width=160, screen_height=210,
                         instruction="Click the button.")
    request = PolicyRequest(task=TaskSpec(task_id="t", suite="miniwob", name="click-test"),
                            obs=Obs(observation=screen, image=np.zeros((210, 160, 3), np.uint8)), step_index=0)
    client = make_client("torch", "t", kind="tiny", greedy=True, threads=0)

    async def act():
        await client.load_version(pv, store)
        return await client.act(request)

    reply = asyncio.run(act())
    assert reply.version == 3 and reply.decision.action == Click(x=2.5 / GRID, y=1.5 / GRID)


def test_a_version_of_an_unregistered_kind_is_refused_at_publishing(tmp_path):
    policy = TinyPolicy("t")  # its kind, "tiny", is not registered in this test
    with pytest.raises(UserError, match="unknown policy kind 'tiny'; known: .*pixel"):
        make_version(policy, save_weights(policy, BlobStore(str(tmp_path))), parent=None)
