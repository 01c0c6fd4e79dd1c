"""The language policy as a plug-in (``infra.runtime.policy.PolicyKind``): a Hugging Face causal
LM (SmolLM2-135M-Instruct in the main job) that trains and serves on a GPU, fine-tuned by
`flywheel bc` / `flywheel sft` on rendered contexts (trainer.policies.lm.bc), asked in the
UI-TARS prompt of its config, exported to vLLM as a Hugging Face folder. The model is imported
only when a policy is built (this module stays torch-free for the command line)."""

from __future__ import annotations

from typing import Any

from infra.runtime.policy import DemoPPO
from schemas.prompt import PromptSpec
from trainer.core import metric_names as M
from trainer.policies.base import Cloned, KindDefaults
from trainer.policies.lm.config import lm_config
from trainer.sft.lm_config import PRETRAINED_LM

# the main job's PPO: a few small minibatches per update (a 135M model on 2 cores)
LM_PPO_ARGS = ("--epochs", "2", "--minibatch-size", "8")
# the main job's DPO: a 135M model's pass over a pair takes seconds on 2 cores (107 pairs'
# reference log-probs alone took 4.7 min in a 30-minute demo, whose DPO step then ran out of time)
LM_DPO_PAIRS = 32


class LMKind(KindDefaults):
    name = "lm"
    accelerated = True
    rft = False  # its fine-tuning on successes is `flywheel sft`
    scores_actions = False  # evaluate reads the response inside each rendered sample, not an action
    chat = True
    bc_epochs, bc_lr, bc_minibatch_size = 6, 1e-4, 8
    # docs/language-policy.md: at 1e-5 one Adam step moves an action 3-4 nats; 32 pairs in one
    # pass took 20 GB (killed)
    dpo_lr, dpo_micro_batch = 1e-6, 2
    demo_ppo_args = LM_PPO_ARGS
    demo_dpo_args = ("--epochs", "3", "--max-pairs", str(LM_DPO_PAIRS))

    def build(self, name: str, config: dict[str, Any] | None) -> Any:
        from trainer.policies.lm.model import LMPolicy  # imports torch: only when a policy is built

        return LMPolicy(name, config or {})

    def full_config(self, config: dict[str, Any]) -> dict[str, Any]:
        from trainer.policies.lm.model import tiny_lm_config  # imports torch: only with a model at hand

        return tiny_lm_config(**config)

    def train_config(self, pretrained: str, seed: int, extra: dict[str, Any]) -> dict[str, Any]:
        base: dict[str, Any] = {**PRETRAINED_LM, "pretrained": pretrained} if pretrained else {}
        return {**base, "seed": seed, **extra}

    def bc_config(self, action_types: tuple[str, ...], pretrained: str, seed: int,
                  extra: dict[str, Any], *, keys: tuple[str, ...] = ()) -> dict[str, Any]:
        if not pretrained:  # the tiny model of the tests: no pointer to ground
            return {"seed": seed, **extra}
        return {**PRETRAINED_LM, **lm_config({"pretrained": pretrained, "seed": seed, **extra})}

    def task_config(self, action_types: tuple[str, ...], overrides: dict[str, Any], *,
                    keys: tuple[str, ...] = ()) -> dict[str, Any]:
        return lm_config(overrides)  # it writes its keys as text: no key head to size

    def clone(self, policy: Any, demos: list[Any], store: Any, cfg: Any) -> Cloned:
        from trainer.policies.lm.bc import clone_lm  # imports torch: only when a job clones

        out = clone_lm(policy, demos, store, cfg)
        metrics = {M.BC_LOSS: out["losses"][-1], M.DEMOS: float(len(demos)), M.STEPS: float(out["samples"])}
        return Cloned(out["losses"], metrics, {}, out["skipped"])

    def dpo_pairs(self, policy: Any, pairs: list[Any], store: Any) -> tuple[Any, Any]:
        from trainer.policies.lm.pairs import lm_pairs  # imports torch: only when DPO runs

        return lm_pairs(policy, pairs, store)

    def demo_ppo(self, cold_start: bool) -> DemoPPO:
        # docs/language-policy.md: one update of 2 epochs at 1e-6 moves a step's log-prob by about
        # 1 nat; at 3e-5, 16 minutes of PPO took click-test from 0.55 under pi_sft to 0.23. Its
        # few epochs at 1e-6 are small steps already (no KL stop); its fine-tuning on successes
        # is `flywheel sft` (no RFT); DPO needs pi_sft as its reference.
        return DemoPPO(lr=1e-6, target_kl=0.0, rft_every=0, dpo_share=0.25 if cold_start else 0.0)

    def prompt_spec(self, config: dict[str, Any]) -> PromptSpec:
        return PromptSpec.from_config(config)

    def export_hf(self, pv: Any, store: Any, out: Any) -> Any:
        from trainer.policies.lm.hf_export import export_hf_folder  # imports torch and transformers

        return export_hf_folder(pv, store, out)


LM = LMKind()
