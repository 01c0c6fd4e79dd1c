"""The language policy's trainers on a torch device (`--device cuda` of flywheel train, sft / ct
and dpo): which devices are accepted, a PPO update on the device moves each step's log-prob
toward its advantage, and a checkpoint written there resumes on the CPU. Each device test runs
on the CPU here and on a GPU where torch sees one (it skips with the reason elsewhere). No Kafka:
nothing is published before the first update (``versions.latest`` answers None)."""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import replace

import numpy as np
import pytest
import torch

from infra.runtime.config import ConfigError
from infra.runtime.consume_loop import CheckpointFile
from infra.runtime.policy import build_policy
from schemas.blobs import BlobStore
from tests.unit.devices import DEVICES
from tests.unit.lm_samples import CONFIG, POLICY, rollout, step_logprobs
from trainer.rl import streaming_ppo as stream
from trainer.rl.config import TrainConfig
from trainer.core.learner import write_weights
from trainer.rl.intake import to_episode
from trainer.rl.state import PPOState
from trainer.sft.lm_config import LMTrainConfig
from trainer.rl.update import collate, ppo_update



def test_a_device_the_trainer_cannot_use_is_refused_with_the_reason(monkeypatch):
    assert TrainConfig(device="cpu").validate().device == "cpu"
    with pytest.raises(ConfigError, match="device must be cpu, cuda or cuda:N, got 'gpu'"):
        TrainConfig(policy_kind="lm", device="gpu").validate()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"device='cuda', but torch sees 0 CUDA device\(s\)"):
        TrainConfig(policy_kind="lm", device="cuda").validate()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert TrainConfig(policy_kind="lm", device="cuda:0").validate().device == "cuda:0"
    # --policy-kind (pixel by default) does not decide: the loaded version's kind does (below)
    assert TrainConfig(device="cuda").validate().device == "cuda"
    with pytest.raises(ConfigError, match=r"device='cuda:1', but torch sees 1 CUDA device"):
        TrainConfig(policy_kind="lm", device="cuda:1").validate()
    with pytest.raises(ConfigError, match="share each update over gloo on the CPU"):
        TrainConfig(policy_kind="lm", device="cuda", nproc_per_node=2).validate()
    with pytest.raises(ConfigError, match="flywheel sft / ct: device must be"):
        LMTrainConfig(device="cuda1").validate()
    for name in ("cuda:00", "cuda:01", "cuda:\u0660", "cuda:-1", "CUDA", " cuda", "cuda:", "cpu:0"):  # torch refuses them
        with pytest.raises(ConfigError, match="device must be cpu, cuda or cuda:N"):
            TrainConfig(policy_kind="lm", device=name).validate()


def test_torchrun_ranks_on_a_gpu_are_refused_before_joining_a_group_and_one_rank_is_not(monkeypatch):
    from trainer.rl import launch

    class Joined(Exception):
        pass

    def join(timeout_s):
        raise Joined

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(launch.distributed, "init_group", join)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="with 2 trainer ranks: they share each update over gloo"):
        launch.run_rank(TrainConfig(policy_kind="lm", device="cuda"), None, threading.Event())
    monkeypatch.setenv("WORLD_SIZE", "1")  # torchrun --nproc-per-node 1 (the rendered Kubernetes trainer): allowed
    with pytest.raises(Joined):
        launch.run_rank(TrainConfig(policy_kind="lm", device="cuda"), None, threading.Event())


def test_the_published_versions_kind_decides_the_device_not_the_flag(tmp_path, monkeypatch):
    from trainer.core.publish import make_version, save_weights

    store = BlobStore(str(tmp_path / "blobs"))
    pixel = build_policy("pixel", POLICY, {})
    published = make_version(pixel, save_weights(pixel, store), parent=None)
    monkeypatch.setattr(stream.versions, "latest", lambda settings, name: published)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    ckpt = CheckpointFile(tmp_path / "ckpt" / "checkpoint.json", PPOState)
    with pytest.raises(ConfigError, match="the pixel policy runs on the CPU only"):
        stream.start_policy(lm_cfg("cuda"), None, store, ckpt)


def test_pixel_on_a_gpu_is_refused_fresh_and_resumed_and_a_published_lm_is_trained_whatever_the_flag(
        tmp_path, monkeypatch):
    from trainer.core.publish import make_version, save_weights

    store = BlobStore(str(tmp_path / "blobs"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    pixel_cfg = TrainConfig(policy_name=POLICY, device="cuda").validate()  # --policy-kind pixel, the default
    ckpt = CheckpointFile(tmp_path / "pixel" / "checkpoint.json", PPOState)
    monkeypatch.setattr(stream.versions, "latest", lambda settings, name: None)
    with pytest.raises(ConfigError, match="the pixel policy runs on the CPU only"):  # a fresh pixel policy
        stream.start_policy(pixel_cfg, None, store, ckpt)
    stream.start_policy(replace(pixel_cfg, device="cpu"), None, store, ckpt)  # checkpointed on the CPU ...
    with pytest.raises(ConfigError, match="the pixel policy runs on the CPU only"):  # ... resumed on a GPU
        stream.start_policy(pixel_cfg, None, store, CheckpointFile(ckpt.path, PPOState))

    # default --policy-kind (pixel) and --device cuda, continuing a published language policy: trained on the GPU
    lm = build_policy("lm", POLICY, CONFIG)
    published = make_version(lm, save_weights(lm, store), parent=None)
    monkeypatch.setattr(stream.versions, "latest", lambda settings, name: published)
    moved = []
    monkeypatch.setattr(type(lm), "to", lambda self, device: moved.append(device) or self)  # no GPU here
    lm_ckpt = tmp_path / "lm" / "checkpoint.json"
    policy, _ = stream.start_policy(pixel_cfg, None, store, CheckpointFile(lm_ckpt, PPOState))
    assert policy.kind == "lm" and moved == ["cuda"]
    # ... and resumed from its checkpoint (a restarted Job), the flag still at pixel: the checkpoint's kind
    resumed, _ = stream.start_policy(pixel_cfg, None, store, CheckpointFile(lm_ckpt, PPOState))
    assert resumed.kind == "lm" and moved == ["cuda", "cuda"]


def lm_cfg(device: str, **kw) -> TrainConfig:
    return TrainConfig(policy_kind="lm", policy_name=POLICY, pretrained="", policy_config=json.dumps(CONFIG),
                       device=device, lr=1e-4, epochs=2, minibatch_size=4, **kw).validate()


@pytest.mark.parametrize("device", DEVICES)
def test_a_ppo_update_on_the_device_moves_logprobs_toward_advantages(device, tmp_path):
    store = BlobStore(str(tmp_path / "blobs"))
    torch.manual_seed(0)
    behaviour = build_policy("lm", POLICY, CONFIG)
    scored = rollout(behaviour, store, 8)
    policy = copy.deepcopy(behaviour).to(device)
    episodes = [to_episode(s, policy, store) for s in scored]
    before = step_logprobs(policy, scored, store)
    gap = float(np.abs(before - [[st.logprob for st in s.trajectory.steps] for s in scored]).max())
    print(f"{device}: v0 re-scores the CPU-sampled steps to within {gap:.2e} nats")
    assert gap < 1e-2  # the trajectory is rebuilt in its context on the device too (the ratio's error)
    cfg = lm_cfg(device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    ppo_update(policy, optimizer, collate(episodes), cfg, generator=torch.Generator().manual_seed(0))
    assert all(p.device.type == device for p in policy.parameters())
    moved = step_logprobs(policy, scored, store) - before
    relative = moved - moved.mean()  # relative to the shift common to all steps (tests/integration/test_lm_ppo.py)
    sign = np.array([1.0 if s.reward > 0 else -1.0 for s in scored])[:, None]
    print(f"{device}: rewarded steps {moved[sign[:, 0] > 0].mean():+.3f}, punished {moved[sign[:, 0] < 0].mean():+.3f}")
    assert (np.sign(relative) == sign).mean() >= 0.75, moved
    assert moved[sign[:, 0] > 0].mean() - moved[sign[:, 0] < 0].mean() > 0.2


@pytest.mark.parametrize("device", DEVICES)
def test_a_checkpoint_written_on_the_device_resumes_on_the_cpu(device, tmp_path, monkeypatch):
    monkeypatch.setattr(stream.versions, "latest", lambda settings, name: None)  # nothing published yet
    store = BlobStore(str(tmp_path / "blobs"))
    ckpt = CheckpointFile(tmp_path / "ckpt" / "checkpoint.json", PPOState)
    torch.manual_seed(0)
    policy, optimizer = stream.start_policy(lm_cfg(device), None, store, ckpt)
    assert all(p.device.type == device for p in policy.parameters())
    scored = rollout(policy, store, 4)
    episodes = [to_episode(s, policy, store) for s in scored]
    ppo_update(policy, optimizer, collate(episodes), lm_cfg(device), generator=torch.Generator().manual_seed(0))
    ckpt.checkpoint.state = ckpt.checkpoint.state.model_copy(
        update={"version": 1, "weights_file": write_weights(ckpt.path.parent, 1, policy, optimizer)})
    ckpt.save()

    resumed, resumed_opt = stream.start_policy(lm_cfg("cpu"), None, store, CheckpointFile(ckpt.path, PPOState))
    assert resumed.version == 1
    for (name, a), b in zip(policy.state_dict().items(), resumed.state_dict().values()):
        assert b.device.type == "cpu" and torch.equal(a.cpu(), b), name
    states = [s for s in resumed_opt.state.values() if "exp_avg" in s]
    assert states and all(s["exp_avg"].device.type == "cpu" for s in states)
    ppo_update(resumed, resumed_opt, collate([to_episode(s, resumed, store) for s in scored]), lm_cfg("cpu"))


def test_flywheel_bc_takes_a_device_for_the_language_policy_only(monkeypatch):
    from trainer.sft.bc_config import BCConfig

    assert BCConfig(policy_kind="lm", device="cpu").validate().device == "cpu"
    with pytest.raises(ConfigError, match="flywheel bc: device must be cpu, cuda or cuda:N"):
        BCConfig(policy_kind="lm", device="gpu").validate()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert BCConfig(policy_kind="lm", device="cuda").validate().device == "cuda"
    with pytest.raises(ConfigError, match="flywheel bc: the pixel policy runs on the CPU only"):
        BCConfig(device="cuda").validate()


@pytest.mark.parametrize("device", DEVICES)
def test_behaviour_cloning_on_the_device_raises_the_demonstrations_log_probs(device, tmp_path):
    from trainer.sft.bc_config import BCConfig
    from trainer.policies.lm.bc import clone_lm, lm_examples
    from tests.fakes.clicks import make_episode, scored_trajectory
    from schemas.actions import Click

    store, rng = BlobStore(str(tmp_path / "blobs")), np.random.default_rng(0)
    demos = []
    for k in range(4):
        e = make_episode("click-test", rng)
        x0, y0, x1, y1 = e.target
        demos.append(scored_trajectory(e, Click(x=(x0 + x1) / 320, y=(y0 + y1) / 420), 0.0, f"d{k}", "scripted", 0, store))
    torch.manual_seed(0)
    start = build_policy("lm", POLICY, CONFIG)
    policy = copy.deepcopy(start).to(device)
    cfg = BCConfig(policy_kind="lm", pretrained="", device=device, epochs=3, lr=3e-3).validate()
    out = clone_lm(policy, demos, store, cfg)
    assert all(p.device.type == device for p in policy.parameters()) and out["samples"] == 4
    samples, _ = lm_examples(start, demos, store, copies=0, max_frac=0.3, seed=0)
    with torch.no_grad():
        before, after = start.sequence_logprobs(samples), policy.cpu().sequence_logprobs(samples)
    assert after.mean() > before.mean() + 1.0, (before, after)
