"""`flywheel verifier train | eval | serve`: a learned outcome reward model from the log, behind
the judge protocol (docs/verifier.md)."""

from __future__ import annotations

import json
import logging

from infra.runtime.command import add_command, command_settings
from infra.runtime.config import describe, resolve
from schemas.blobs import BlobStore
from trainer.verifier.config import VerifierEvalConfig, VerifierServeConfig, VerifierTrainConfig

log = logging.getLogger("flywheel.verifier")


def _train(args) -> int:
    from trainer.verifier import train  # torch is heavy: only these commands load it

    settings = command_settings(args)
    cfg = resolve(VerifierTrainConfig, vars(args)).validate()
    log.info("verifier train config %s", describe(cfg))
    report = train.train(settings, cfg)
    print(train.render(report))
    print(f"model: {cfg.out}  held-out evaluation: {cfg.out}.eval.json")
    print(f"serve it: flywheel verifier serve --model {cfg.out} --data-dir {settings.data_dir}")
    return 0


def _eval(args) -> int:
    from trainer.verifier import train  # torch is heavy: only these commands load it

    settings = command_settings(args)
    cfg = resolve(VerifierEvalConfig, vars(args)).validate()
    report = train.evaluate_command(settings, cfg)
    print(train.render(report))
    print(json.dumps(train.json_safe(report)))
    return 0


def _serve(args) -> int:
    from trainer.verifier import serve, train  # torch is heavy: only these commands load it

    settings = command_settings(args)
    cfg = resolve(VerifierServeConfig, vars(args)).validate()
    model, blob = train.load(cfg.model)
    server = serve.make_server(model, blob["threshold"], BlobStore(settings.blob_root), cfg.host, cfg.port)
    print(f"verifier serving http://{cfg.host}:{server.server_port}/score (threshold {blob['threshold']:.4f})",
          flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def register(sub) -> None:
    parser = sub.add_parser("verifier", help="a learned outcome reward model: train it on the log, evaluate it "
                            "on held-out tasks, serve it as the streams' judge")
    verbs = parser.add_subparsers(dest="verifier_command", metavar="VERB", required=True)
    add_command(verbs, "train", "train on the log's episodes (label: the page's verdict), whole tasks held out",
                _train, VerifierTrainConfig)
    add_command(verbs, "eval", "the confusion table per held-out task of a trained model", _eval, VerifierEvalConfig)
    add_command(verbs, "serve", "serve a trained model behind the judge protocol (POST /score)", _serve,
                VerifierServeConfig)
