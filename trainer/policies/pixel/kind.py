"""The pixel policy as a plug-in (``infra.runtime.policy.PolicyKind``): a CNN trained from
scratch on the CPU, where it builds its inputs; behaviour cloning by maximum likelihood of every
step, checked by the greedy match; rejection-sampling rounds inside the PPO trainer. The model
is imported only when a policy is built (this module stays torch-free for the command line)."""

from __future__ import annotations

from typing import Any

from trainer.policies.base import Cloned, KindDefaults
from trainer.policies.pixel.config import pixel_config


class PixelKind(KindDefaults):
    name = "pixel"
    explores = True  # trainer.policies.pixel.model.mix_floor
    sized_heads = True

    def build(self, name: str, config: dict[str, Any] | None) -> Any:
        from trainer.policies.pixel.model import PixelPolicy  # imports torch: only when a policy is built

        return PixelPolicy(name=name, config=config)

    def bc_config(self, action_types: tuple[str, ...], pretrained: str, seed: int,
                  extra: dict[str, Any], *, keys: tuple[str, ...] = ()) -> dict[str, Any]:
        return pixel_config(action_types, {"seed": seed, **extra}, keys)

    def task_config(self, action_types: tuple[str, ...], overrides: dict[str, Any], *,
                    keys: tuple[str, ...] = ()) -> dict[str, Any]:
        return pixel_config(action_types, overrides, keys)

    def clone(self, policy: Any, demos: list[Any], store: Any, cfg: Any) -> Cloned:
        from trainer.policies.pixel.bc import greedy_match  # imports torch: only when a job clones
        from trainer.sft.bc import clone_steps

        return clone_steps(policy, demos, store, cfg, match=greedy_match)

    def dpo_pairs(self, policy: Any, pairs: list[Any], store: Any) -> tuple[Any, Any]:
        from trainer.policies.pixel.pairs import pixel_pairs  # imports torch: only when DPO runs

        return pixel_pairs(policy, pairs, store)


PIXEL = PixelKind()
