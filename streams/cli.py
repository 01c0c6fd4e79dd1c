"""`flywheel streams` (the Faust worker) and `flywheel rescore` (replay through another scorer)."""

from __future__ import annotations

import logging
import sys

from infra.runtime.command import add_command, command_settings
from infra.runtime.config import describe, resolve
from infra.runtime.metrics import process_metrics, serve_metrics
from streams.config import RescoreConfig, StreamsConfig, app_id_for

log = logging.getLogger("flywheel.streams")


def _streams(args) -> int:
    settings = command_settings(args)
    cfg = resolve(StreamsConfig, vars(args))
    log.info("streams config %s (app id %s)", describe(cfg), app_id_for(settings, cfg))
    use_event_loop(cfg.event_loop)  # before Faust makes its loop
    from streams.app import declare_internal_topics, make_app, run_worker  # faust is heavy: only this command needs it

    metrics = process_metrics("streams")
    serve_metrics(settings, metrics)
    app = make_app(settings, cfg, metrics)
    declare_internal_topics(app, settings)
    sys.argv = [sys.argv[0]]  # Faust's worker parses argv itself; ours is already parsed
    run_worker(app, cfg.loglevel)
    return 0


def use_event_loop(name: str) -> None:
    """Faust's public loop option (mode.loop.use): uvloop's event loop, or asyncio's own ("aio")."""
    import mode.loop  # Faust's own dependency: imported only by the commands that run Faust

    mode.loop.use(name)


def _rescore(args) -> int:
    # local: loads confluent-kafka, needed only on this path
    from streams.rescore import rescore

    settings = command_settings(args)
    cfg = resolve(RescoreConfig, vars(args))
    log.info("rescore config %s", describe(cfg))
    counts = rescore(settings, cfg)
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    return 0


def register(sub) -> None:
    add_command(sub, "streams", "run the Faust stream processors (assemble, score, route)", _streams, StreamsConfig)
    add_command(sub, "rescore", "replay flywheel.trajectories.v1 through another scorer", _rescore, RescoreConfig)
