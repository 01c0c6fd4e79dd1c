"""The defaults a policy kind keeps unless it says otherwise, so a new kind is one small package.

``PolicyDefaults`` is mixed into a policy class beside ``torch.nn.Module``: the methods of the
``infra.runtime.policy.Policy`` protocol that make no sense for every kind (a bootstrap input,
head learning rates, earlier screenshots). ``KindDefaults`` is the base of a kind's plug-in
object (``infra.runtime.policy.PolicyKind``): the numbers and job steps of a small model trained
from scratch on the CPU, with behaviour cloning by maximum likelihood of every demonstrated
step through ``evaluate`` (trainer.sft.bc). Nothing here imports torch: the `flywheel` command
line reads a kind's facts without loading a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infra.runtime.errors import UserError
from infra.runtime.policy import DemoPPO


class PolicyDefaults:
    """Protocol methods with a meaning every kind can live with."""

    def bootstrap_input(self, traj: Any, store: Any) -> Any | None:
        return None  # the trainer bootstraps a truncated episode from its last state's value

    def values(self, inputs: Any, instructions: list[str]) -> Any:
        raise NotImplementedError(f"{type(self).__name__} gives no bootstrap input, so nothing asks its values")

    def param_groups(self, lr: float, head_lr_mult: float) -> list[dict[str, Any]]:
        return [{"params": list(self.parameters()), "lr": lr}]  # type: ignore[attr-defined]

    def use_blob_store(self, store: Any) -> None:
        """Nothing to do: this policy sees the current screenshot only."""


@dataclass
class Cloned:
    """What behaviour cloning did (``PolicyKind.clone``): the loss per epoch, the metrics its
    version is published with, the greedy action's match with the demonstrations (per task and
    ``all``; empty when the kind has no such check) and the skipped demonstrations by reason."""

    losses: list[float]
    metrics: dict[str, float]
    train_match: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)


class KindDefaults:
    """A kind's plug-in object less ``name`` and ``build``, which each kind gives."""

    name = ""
    accelerated = False
    rft = True
    # its evaluate scores any action it is handed (DAgger's expert labels, --expert-coef), not only
    # the one its own sample holds
    scores_actions = True
    chat = False
    explores = False
    sized_heads = False
    bc_epochs, bc_lr, bc_minibatch_size = 40, 1e-2, 32
    dpo_lr, dpo_micro_batch = 1e-3, 0
    demo_ppo_args: tuple[str, ...] = ()
    demo_dpo_args: tuple[str, ...] = ()

    def build(self, name: str, config: dict[str, Any] | None) -> Any:
        raise NotImplementedError(f"policy kind {self.name!r} builds no policy")

    def full_config(self, config: dict[str, Any]) -> dict[str, Any]:
        return dict(config)

    def train_config(self, pretrained: str, seed: int, extra: dict[str, Any]) -> dict[str, Any]:
        return {"seed": seed, **extra}

    def bc_config(self, action_types: tuple[str, ...], pretrained: str, seed: int,
                  extra: dict[str, Any], *, keys: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"seed": seed, **extra}

    def task_config(self, action_types: tuple[str, ...], overrides: dict[str, Any], *,
                    keys: tuple[str, ...] = ()) -> dict[str, Any]:
        return dict(overrides)

    def clone(self, policy: Any, demos: list[Any], store: Any, cfg: Any) -> Cloned:
        from trainer.sft.bc import clone_steps  # imports torch: only when a job clones

        return clone_steps(policy, demos, store, cfg)

    def dpo_pairs(self, policy: Any, pairs: list[Any], store: Any) -> tuple[Any, Any]:
        raise UserError(f"the {self.name} policy has no preference-pair inputs: DPO trains the pixel and language policies")

    def demo_ppo(self, cold_start: bool) -> DemoPPO:
        if cold_start:
            # fine-tuning a cloned policy takes smaller steps than learning from random weights
            # (default suite, seed 0: at 3e-3 the typing tasks fell from 0.9-1.0 under pi_sft to 0.0
            # within 6 minutes of PPO; at 3e-4 they held); RFT rounds every 8 updates, one pass
            # each: every 4 with two passes, a round took 35% of the trainer on the default suite,
            # which bound the run at 12.3 env steps/s; this is a quarter of that work
            # (docs/performance.md, "RFT rounds sized to the trainer"; app.run_config.kind_rft_every
            # says where they stay off)
            # PPO's epochs 4, not the trainer's 8: the update's compute is its epochs' forward and
            # backward passes, and on the default suite the trainer set the run's pace
            # (docs/performance.md, "PPO's epochs sized to the trainer")
            return DemoPPO(lr=3e-4, target_kl=0.0, rft_every=8 if self.rft else 0, dpo_share=0.0, rft_epochs=1,
                           epochs=4)
        # from random weights, 8 epochs at 3e-3 on a 90-step batch moved the policy so far per
        # update that tasks collapsed onto one wrong click (docs/tasks.md, starter suite): stop at
        # a KL of 0.02; few successes to fine-tune on, so no RFT
        return DemoPPO(lr=0.0, target_kl=0.02, rft_every=0, dpo_share=0.0, rft_epochs=1)

    def prompt_spec(self, config: dict[str, Any]) -> Any | None:
        return None

    def export_hf(self, pv: Any, store: Any, out: Any) -> Any:
        raise UserError(f"{pv.policy} v{pv.version} is a {pv.kind} policy; vLLM serves language policies")
