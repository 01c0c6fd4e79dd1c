"""`flywheel serve`, `flywheel merge`, `flywheel sft`, `flywheel ct` (registered by trainer.cli)."""

from __future__ import annotations

import asyncio
import logging

from infra.runtime.command import add_command, command_settings
from infra.runtime.config import describe, resolve
from infra.runtime.errors import UserError
from infra.runtime.procs import stop_on_signals

log = logging.getLogger("flywheel.serving")


def cmd_serve(args) -> int:
    # local: loads Pillow, aiohttp, confluent-kafka, numpy, prometheus-client, needed only on this path
    from trainer.serving.server import ServeConfig, build_server, serve_forever

    settings = command_settings(args)
    cfg = resolve(ServeConfig, vars(args))
    log.info("serve config %s", describe(cfg))
    if cfg.backend == "vllm":
        # local: loads numpy, needed only on this path
        from trainer.serving.vllm_backend import serve_vllm

        return serve_vllm(settings, cfg, stop_on_signals(log, "stopping after the current batch"))
    _, app = build_server(settings, cfg)
    try:
        asyncio.run(serve_forever(app, cfg.host, cfg.port))
    except KeyboardInterrupt:
        pass
    return 0


def _floats(text: str, what: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--{what} must be comma-separated numbers, got {text!r}") from None


def cmd_merge(args) -> int:
    # local: loads confluent-kafka, numpy, torch, needed only on this path
    from trainer.serving.merge import MergePlan, run_merge

    settings = command_settings(args)
    versions = [int(v) for v in _floats(args.versions, "versions")]
    plan = MergePlan(args.policy, versions, _floats(args.alphas, "alphas"))
    pv = run_merge(settings, plan)
    print(f"published {pv.policy} v{pv.version} (parent v{pv.parent}) sha256 {pv.sha256}")
    return 0


def _cmd_lm_train(mode: str):
    def run(args) -> int:
        # local: loads Pillow, confluent-kafka, numpy, torch, needed only on this path
        from trainer.sft.ct_samples import ct_samples
        from trainer.sft.lm_stream import LMStreamTrainer, LMTrainConfig
        from trainer.sft.sft_samples import sft_samples

        settings = command_settings(args)
        cfg = resolve(LMTrainConfig, vars(args))
        log.info("%s config %s", mode, describe(cfg))
        trainer = LMStreamTrainer(settings, cfg, mode, sft_samples if mode == "sft" else ct_samples)
        updates = trainer.run(stop_on_signals(log, "stopping after the current batch"))
        log.info("%s: %d update(s)", mode, updates)
        return 0
    return run


def register(subparsers) -> None:
    # local: loads Pillow, aiohttp, confluent-kafka, numpy, prometheus-client, needed only on this path
    from trainer.sft.lm_config import LMTrainConfig
    from trainer.serving.server import ServeConfig

    add_command(subparsers, "serve", "serve the current policy version over HTTP (OpenAI chat / act), hot-reloading "
                "new versions", cmd_serve, ServeConfig)
    p = add_command(subparsers, "merge", "publish theta = sum_k alpha_k * theta_k of published versions as a new version",
                    cmd_merge)
    p.add_argument("--policy", required=True, help="policy name")
    p.add_argument("--versions", required=True, help="comma-separated versions, e.g. 3,5")
    p.add_argument("--alphas", required=True, help="comma-separated weights >= 0 summing to 1, e.g. 0.5,0.5")

    for mode, topic in (("sft", "flywheel.sft.v1"), ("ct", "flywheel.ct.v1")):
        what = "supervised fine-tuning on" if mode == "sft" else "continual pre-training on"
        add_command(subparsers, mode, f"{what} {topic} for a language policy; publishes versions", _cmd_lm_train(mode),
                    LMTrainConfig)
