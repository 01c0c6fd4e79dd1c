"""The trainer's typed config (``flywheel train``): arguments > FLYWHEEL_* env > defaults."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from infra.runtime.config import ConfigError, json_object, opt
from infra.runtime.policy import policy_kind


def check_device(device: str, kind: str | None, command: str) -> None:
    """ConfigError unless ``device`` names a torch device this machine has, on which ``kind``
    trains: an accelerated kind (``PolicyKind.accelerated``: the language policy) moves its inputs
    to its device; another (the pixel policy) builds them on the CPU and is small enough to train
    there, so it trains on the CPU only. ``kind`` None: the name and the device only (before the
    policy is loaded, its kind is not yet known)."""
    if device == "cpu":
        return
    if not re.fullmatch(r"cuda(:(0|[1-9][0-9]*))?", device):  # what torch.device accepts
        raise ConfigError(f"{command}: device must be cpu, cuda or cuda:N, got {device!r}")
    if kind is not None and not policy_kind(kind).accelerated:
        raise ConfigError(f"{command}: the {kind} policy runs on the CPU only (its inputs are built there); "
                          f"device={device!r} is for a kind that trains on a GPU (the language policy)")
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.partition(":")[2] or 0)
    if index >= count:
        raise ConfigError(f"{command}: device={device!r}, but torch sees {count} CUDA device(s) on this machine"
                          + ("" if count else f" (torch {torch.__version__}, CUDA build {torch.version.cuda})"))



def place(policy: Any, device: str, command: str) -> Any:
    """``policy`` moved to ``device`` once ``check_device`` accepts its kind there (the one home of
    that pair for the commands that load a policy and only then know its kind)."""
    check_device(device, policy.kind, command)
    return policy.to(device)

@dataclass
class TrainConfig:
    policy_kind: str = opt("pixel", "policy kind to train (a registered kind: pixel, lm)")
    policy_name: str = opt("pixel-miniwob", "policy name: the key on flywheel.policy.v1 and the checkpoint folder")
    policy_config: str = opt("", "JSON object merged into the policy's default config (grid, action_types, ...)")
    pretrained: str = opt("smollm2-135m", "policy_kind lm: the checkpoint to start from, a named one (smollm2-135m) or a local Hugging Face folder; empty: the tiny model of policy_config")
    # lr, epochs, min_batch, tis_cap: tuned on real MiniWoB click-test + click-test-2 frames
    # (benchmarks/learn_miniwob.py): both targets in 660-930 episodes over four seeds
    lr: float = opt(3e-3, "Adam learning rate")
    head_lr_mult: float = opt(1.0, "learning rate of the parts a policy trains from scratch (the language policy's patch "
                                   "adapter, pointer and value head) as a multiple of lr; 1: one rate for all")
    gamma: float = opt(1.0, "discount per step")
    lam_critic: float = opt(1.0, "GAE lambda of the critic's value targets (decoupled GAE)")
    alpha: float = opt(1.0, "length-adaptive GAE: lam_policy = 1 - 1/(alpha * trajectory length)")
    lam_policy: float = opt(-1.0, "GAE lambda of the actor's advantages; < 0: length-adaptive from alpha (coupled GAE: equal to lam_critic)")
    eps_low: float = opt(0.2, "PPO clip below: ratio >= 1 - eps_low")
    eps_high: float = opt(0.28, "PPO clip above (clip-higher): ratio <= 1 + eps_high")
    # decoupled PPO (AReaL): with rollouts acting 2 versions behind, off made click-test-2 take
    # 3864 episodes instead of 836 (benchmarks/learn_miniwob.py --lag 2)
    tis_cap: float = opt(2.0, "truncated importance weight cap against the behaviour policy (0: off; then the behaviour log-prob is PPO's old log-prob)")
    ent_coef: float = opt(0.003, "entropy bonus coefficient")
    target_kl: float = opt(0.0, "stop an update's epochs once an epoch's approx_kl (KL from the policy the update started "
                                "from) passes 1.5 times this (0: every epoch runs)")
    vf_coef: float = opt(0.5, "value loss coefficient")
    kl_coef: float = opt(0.0, "KL penalty (k3) coefficient against the reference policy (0: off); keeps PPO near pi_sft after a cold start")
    kl_ref_version: int = opt(-1, "published version of the KL reference policy (-1: the version the trainer started from, pi_sft after a cold start)")
    expert_coef: float = opt(0.0, "DAgger: weight of the NLL of the steps' expert labels (`flywheel rollout "
                                  "--expert-labels`: the scripted solver's action on the policy's own state) beside "
                                  "PPO's loss (0: off)")
    dagger_every: int = opt(0, "DAgger rounds (trainer.sft.dagger): after every this many PPO updates, fit the policy to "
                               "the expert labels of the states it visited in the episodes trained on (0: off; one "
                               "trainer process, a kind that scores any action: the pixel policy)")
    dagger_buffer: int = opt(8192, "DAgger: labelled steps kept for the rounds, at most (in the trainer's memory; when full, "
                                   "the task holding the most gives up its oldest)")
    dagger_epochs: int = opt(1, "DAgger: passes over the buffer per round")
    dagger_sample: int = opt(0, "DAgger: labelled steps a round fits, drawn at random from the buffer without "
                                "replacement (0: all of it; a round over 8192 steps took 17-47 s on 2 cores)")
    dagger_lr: float = opt(1e-3, "DAgger: Adam learning rate of a round (an optimiser of its own, as RFT's)")
    norm_adv: bool = opt(True, "whiten advantages per update")
    max_grad_norm: float = opt(1.0, "gradient clipping norm")
    epochs: int = opt(8, "PPO epochs over each batch")
    minibatch_size: int = opt(64, "steps per minibatch")
    chunk_steps: int = opt(128, "a longer episode trains as chunks of at most this many steps, each bootstrapping from the critic at its cut (trainer.rl.chunks; 0: whole episodes)")
    min_batch: int = opt(32, "complete trajectories that trigger an update (partially-filled rollout pool)")
    max_batch_steps: int = opt(4096, "... or this many pooled steps, whichever comes first: long episodes keep the pool's inputs bounded")
    max_wait_s: float = opt(20.0, "update with fewer trajectories once the oldest has waited this long")
    scorer: str = opt("rule-v1", "train only on trajectories scored by this scorer (a `flywheel rescore` run may route other scores to RL)")
    value_pretrain_max_batches: int = opt(0, "value pretraining: critic-only batches at most, before PPO starts (0: off)")
    value_pretrain_max_s: float = opt(0.0, "... and at most this many seconds from its first batch (0: no time bound)")
    value_pretrain_min_ev: float = opt(0.5, "value pretraining ends once explained variance reaches this")
    value_pretrain_rel_tol: float = opt(0.05, "... or once the loss changes by less than this fraction ...")
    value_pretrain_patience: int = opt(3, "... for this many batches in a row")
    rft_every: int = opt(0, "rejection-sampling fine-tuning (trainer.sft.rft): after every this many PPO updates, fine-tune "
                            "on the policy's successful trajectories on flywheel.sft.v1 (0: off; pixel policy only)")
    rft_per_task: int = opt(64, "RFT: per task, the newest this many of the policy's own successes and at most this many demonstrations "
                                   "(0: demonstrations only, one per task)")
    rft_solved: float = opt(0.95, "RFT: a task whose last 100 trained episodes succeeded at least this often (and "
                                  "that has 20) gets none of its own successes in a round, only its demonstrations "
                                  "(>1: off); its rounds stay short, on what is still failing")
    rft_epochs: int = opt(2, "RFT: passes over the round's steps")
    rft_lr: float = opt(1e-3, "RFT: Adam learning rate (an optimiser of its own; PPO's is left as it is)")
    sil_coef: float = opt(0.0, "self-imitation (trainer.rl.self_imitation): weight of its loss on steps replayed from the "
                               "policy's own best episodes, beside PPO's in every minibatch (0: off; one trainer process)")
    sil_per_task: int = opt(16, "self-imitation: episodes the replay keeps per task (the newest successes, then the highest returns)")
    sil_batch: int = opt(64, "self-imitation: replayed steps drawn per update (by priority), shared among an epoch's minibatches")
    sil_beta: float = opt(0.01, "self-imitation: weight of its value term, 1/2 ((R - V)+)^2")
    sil_max_steps: int = opt(4096, "self-imitation: steps the replay holds at most (their inputs live in the trainer's memory)")
    ent_floor: float = opt(0.0, "entropy band: below this mean policy entropy the entropy coefficient rises for the next "
                                "update (x1.5 each time); 0: off, ent_coef stays as set (one trainer process)")
    ent_ceiling: float = opt(0.0, "entropy band: above this mean entropy the coefficient falls back toward ent_coef "
                                  "(0: twice ent_floor)")
    seed: int = opt(0, "seed of the initial weights and of sampling")
    device: str = opt("cpu", "torch device of the policy: cpu, or cuda / cuda:N for the language policy in one process")
    torch_threads: int = opt(0, "torch intra-op threads (0: torch's default)")
    group_id: str = opt("", "consumer group on flywheel.rl.v1 (default: trainer-<policy_name>)")
    run_id: str = opt("", "key of this run's TrainerMetrics (default: <policy_name>-<start time>)")
    max_updates: int = opt(0, "stop after this many updates (0: run until stopped)")
    poll_s: float = opt(0.5, "longest wait for records in one poll")
    session_timeout_s: float = opt(45.0, "consumer group session timeout on flywheel.rl.v1: a killed trainer's partitions go to its restart after this long")
    max_update_s: float = opt(1800.0, "longest update before the group gives the trainer's partitions away (the consumer's max.poll.interval.ms; an update of the language policy on 2 cores took over 5 minutes)")
    nproc_per_node: int = opt(1, "trainer processes to start on this machine (torch.distributed over gloo); rank 0 reads flywheel.rl.v1, all share each update. 1: one process, or the ranks torchrun started")
    dist_timeout_s: float = opt(300.0, "a collective of the distributed trainer that waits longer fails the job (a hung rank; a killed one fails it at once)")

    def policy_overrides(self) -> dict[str, Any]:
        return policy_kind(self.policy_kind).train_config(self.pretrained, self.seed,
                                                          json_object(self.policy_config, "policy_config"))

    def validate(self) -> "TrainConfig":
        # The kind is checked where the policy is loaded (trainer.rl.start.start_policy): a trainer that
        # continues a published language policy trains it whatever --policy-kind says.
        check_device(self.device, None, "flywheel train")
        if self.device != "cpu" and self.nproc_per_node > 1:
            raise ConfigError(f"device={self.device!r} with nproc_per_node={self.nproc_per_node}: the ranks share "
                              "each update over gloo on the CPU; train on a GPU in one process (nproc_per_node 1)")
        if self.min_batch < 1 or self.epochs < 1 or self.minibatch_size < 1:
            raise ConfigError("min_batch, epochs and minibatch_size must be >= 1")
        if not self.expert_coef >= 0:  # NaN included
            raise ConfigError(f"expert_coef must be >= 0 (0: off), got {self.expert_coef}")
        if self.expert_coef and not policy_kind(self.policy_kind).scores_actions:
            raise ConfigError(f"expert_coef needs a policy that scores any action it is handed (the pixel policy); "
                              f"the {self.policy_kind} policy scores only its own samples")
        if min(self.dagger_every, self.dagger_sample) < 0 or self.dagger_buffer < 1 or self.dagger_epochs < 1 \
                or not self.dagger_lr > 0:
            raise ConfigError("dagger_every and dagger_sample must be >= 0, dagger_buffer and dagger_epochs >= 1 and "
                              "dagger_lr > 0")
        if self.dagger_every and (not policy_kind(self.policy_kind).scores_actions or self.nproc_per_node > 1):
            raise ConfigError(f"dagger_every fits a policy to labels it is handed (the pixel policy) in one trainer "
                              f"process (on several ranks the round would run on rank 0 alone); got the "
                              f"{self.policy_kind} policy on {self.nproc_per_node} process(es)")
        if not self.target_kl >= 0:  # NaN included
            raise ConfigError(f"target_kl must be >= 0 (0: off), got {self.target_kl}")
        if self.max_batch_steps < 1:
            raise ConfigError(f"max_batch_steps must be >= 1, got {self.max_batch_steps}")
        if self.chunk_steps < 0:
            raise ConfigError(f"chunk_steps must be >= 0 (0: whole episodes), got {self.chunk_steps}")
        if self.head_lr_mult <= 0:
            raise ConfigError(f"head_lr_mult must be > 0, got {self.head_lr_mult}")
        if not (0 <= self.eps_low < 1 and self.eps_high >= 0):
            raise ConfigError(f"eps_low={self.eps_low} must be in [0, 1) and eps_high={self.eps_high} >= 0")
        if self.rft_every < 0 or self.rft_per_task < 0 or self.rft_epochs < 1 or self.rft_lr <= 0:
            raise ConfigError("rft_every and rft_per_task must be >= 0, rft_epochs >= 1 and rft_lr > 0")
        if self.rft_every and (not policy_kind(self.policy_kind).rft or self.nproc_per_node > 1):
            raise ConfigError("rft_every works for a kind with RFT rounds (the pixel policy) in one "
                              "trainer process only (the language policy's fine-tuning is `flywheel sft`; on several "
                              "ranks the round would run on rank 0 alone)")
        self._validate_sil()
        json_object(self.policy_config, "policy_config")  # a bad JSON fails here, not once the policy loads
        if self.nproc_per_node < 1 or self.dist_timeout_s <= 0:
            raise ConfigError("nproc_per_node must be >= 1 and dist_timeout_s > 0")
        if not self.session_timeout_s <= self.max_update_s <= 86400:
            raise ConfigError(f"max_update_s must be within [session_timeout_s, 86400] seconds (librdkafka's rule), "
                              f"got {self.max_update_s}")
        return self

    def _validate_sil(self) -> None:
        if not (self.sil_coef >= 0 and self.sil_beta >= 0 and self.ent_floor >= 0 and self.ent_ceiling >= 0):  # NaN too
            raise ConfigError("sil_coef, sil_beta, ent_floor and ent_ceiling must be >= 0 (0: off)")
        if min(self.sil_per_task, self.sil_batch, self.sil_max_steps) < 1:
            raise ConfigError("sil_per_task, sil_batch and sil_max_steps must be >= 1")
        if self.ent_ceiling and self.ent_ceiling <= self.ent_floor:
            raise ConfigError(f"ent_ceiling ({self.ent_ceiling}) must be above ent_floor ({self.ent_floor}), or 0")
        if (self.sil_coef or self.ent_floor) and self.nproc_per_node > 1:
            raise ConfigError("sil_coef and ent_floor work in one trainer process (the other ranks would not see the "
                              "replay or the adapted coefficient)")

    def band_ceiling(self) -> float:
        """The entropy band's upper edge (``ent_ceiling``, or twice ``ent_floor`` when 0)."""
        return self.ent_ceiling or 2 * self.ent_floor
