"""`flywheel dpo`: DPO of a published policy on the reflection pairs of flywheel.pairs.v1 (trainer.dpo.train)."""

from __future__ import annotations

import argparse

from infra.runtime.command import add_command, command_settings
from infra.runtime.config import resolve
from trainer.core import metric_names as M


def cmd_dpo(args: argparse.Namespace) -> int:
    # local: loads Pillow, confluent-kafka, numpy, torch, needed only on this path
    from trainer.dpo.train import run_dpo
    from trainer.dpo.config import DPOConfig

    settings = command_settings(args)
    out = run_dpo(resolve(DPOConfig, vars(args)).validate(), settings)
    first, last = out["first"], out["last"]
    print(f"published {out['kind']} version {out['version']} (reference v{out['reference']}) after DPO on "
          f"{out['pairs']} pairs ({'all' if out['pairs'] == out['usable'] else 'a sample'} of {out['usable']} usable, "
          f"selected {sum(out['selected'].values())} {out['selected']}): loss {first[M.DPO_LOSS]:.3f} -> {last[M.DPO_LOSS]:.3f}, "
          f"reward margin {last[M.DPO_REWARD_MARGIN]:.3f}, accuracy {last[M.DPO_ACCURACY]:.0%}, {out['seconds']:.0f}s")
    if out["skipped"]:
        print(f"skipped pairs: {out['skipped']}")
    return 0


def register(sub) -> None:
    # local: loads numpy, needed only on this path
    from trainer.dpo.config import DPOConfig

    add_command(sub, "dpo", "DPO on reflection pairs: flywheel.pairs.v1 + pi_SFT -> a policy version", cmd_dpo, DPOConfig)
