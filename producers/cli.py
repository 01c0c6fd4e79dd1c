"""`flywheel rollout`, `flywheel tasks submit` and `flywheel annotate`."""

from __future__ import annotations

import asyncio
import json
import logging
import signal

from infra.runtime.config import add_arguments, describe, resolve
from infra.runtime.errors import UserError
from infra.runtime.settings import Settings, load_settings, log_settings

log = logging.getLogger("flywheel.producers")


def make_policy_client(cfg, blobs):
    """The PolicyClient the rollout config asks for."""
    # local: loads numpy, needed only on this path
    from producers.policy_client import make_client

    options: dict = {}
    if cfg.policy_backend == "torch":
        try:
            config = json.loads(cfg.policy_config) if cfg.policy_config else {}
        except json.JSONDecodeError as exc:
            raise UserError(f"--policy-config is not valid JSON: {exc}") from None
        options = {"kind": cfg.policy_kind, "config": config, "greedy": cfg.greedy, "blobs": blobs}
    elif cfg.policy_backend == "scripted":
        options = {"noise": cfg.demo_noise}
    elif cfg.policy_backend == "http":
        options = {"base_url": cfg.policy_url, "mode": cfg.policy_mode, "blobs": blobs}
    return make_client(cfg.policy_backend, cfg.policy_name, **options)


async def _rollout(settings, cfg) -> int:
    # local: loads confluent-kafka, numpy, prometheus-client, needed only on this path
    from producers.rollout import RolloutWorker, default_worker_id
    from schemas.blobs import BlobStore

    client = make_policy_client(cfg, BlobStore(settings.blob_root))
    worker = RolloutWorker(cfg, settings, client, cfg.worker_id or default_worker_id())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.request_stop)
    return await worker.run()


def cmd_rollout(args) -> int:
    # local: loads confluent-kafka, numpy, prometheus-client, needed only on this path
    from producers.rollout import RolloutConfig

    settings = load_settings(vars(args))
    cfg = resolve(RolloutConfig, vars(args))
    if cfg.sandboxes < 1:
        raise UserError(f"--sandboxes must be >= 1, got {cfg.sandboxes}")
    log_settings(settings)
    log.info("rollout config %s", describe(cfg))
    return asyncio.run(_rollout(settings, cfg))


def cmd_tasks_submit(args) -> int:
    # local: loads confluent-kafka, needed only on this path
    from producers.tasks import build_tasks, read_jsonl_file, submit

    settings = load_settings(vars(args))
    if args.file and args.tasks:
        raise UserError("give either --file or --tasks, not both")
    if args.file:
        tasks = read_jsonl_file(args.file)
    elif args.tasks:
        names = [n.strip() for n in args.tasks.split(",") if n.strip()]
        tasks = build_tasks(args.suite, names, args.episodes, args.seed, max_steps=args.max_steps,
                            timeout_s=args.timeout_s, prefix=args.run_id)
    else:
        raise UserError("nothing to submit: give --tasks NAME,... or --file tasks.jsonl")
    count = submit(settings, tasks)
    print(f"submitted {count} task(s)")
    return 0


def cmd_tasks_list(args) -> int:
    # local: loads confluent-kafka, needed only on this path
    from producers.tasks import known_tasks

    for name in known_tasks(args.suite):
        print(name)
    return 0


def cmd_annotate(args) -> int:
    import threading

    # local: loads confluent-kafka, numpy, needed only on this path
    from producers.annotate import AnnotateConfig, Annotator

    settings = load_settings(vars(args))
    cfg = resolve(AnnotateConfig, vars(args))
    if cfg.batch_episodes < 1:
        raise UserError(f"--batch-episodes must be >= 1, got {cfg.batch_episodes}")
    log_settings(settings)
    log.info("annotate config %s", describe(cfg))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # finish the batch, commit, close the browser
        signal.signal(sig, lambda *_: stop.set())
    stats = Annotator(settings, cfg).run(stop)
    print(f"annotated {stats.episodes} failed episodes: pairs {dict(stats.pairs)}, outcomes {dict(stats.outcomes)}, "
          f"skipped {dict(stats.skipped)}, {stats.dead_letters} dead letters")
    return 0


def register(subparsers) -> None:
    # local: loads confluent-kafka, numpy, prometheus-client, needed only on this path
    from producers.rollout import RolloutConfig

    p = subparsers.add_parser("rollout", help="run a rollout worker: tasks in, episode events out")
    add_arguments(p, RolloutConfig)
    add_arguments(p.add_argument_group("platform settings"), Settings)
    p.set_defaults(func=cmd_rollout)

    # local: loads confluent-kafka, numpy, needed only on this path
    from producers.annotate import AnnotateConfig

    a = subparsers.add_parser("annotate", help="reflection tuning: failed episodes (flywheel.ct.v1) -> "
                                               "error-correction and post-reflection pairs (flywheel.pairs.v1)")
    add_arguments(a, AnnotateConfig)
    add_arguments(a.add_argument_group("platform settings"), Settings)
    a.set_defaults(func=cmd_annotate)

    tasks = subparsers.add_parser("tasks", help="submit or list tasks")
    tsub = tasks.add_subparsers(dest="tasks_command", metavar="ACTION")
    s = tsub.add_parser("submit", help="produce TaskSpecs to flywheel.tasks.v1 and wait for the acks")
    s.add_argument("--suite", default="miniwob", choices=("miniwob", "desktop", "games"), help="task suite (default miniwob)")
    s.add_argument("--tasks", default="", help="comma-separated task names, e.g. click-test,click-test-2")
    s.add_argument("--episodes", type=int, default=1, help="episodes per task name (seeds seed..seed+K-1)")
    s.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    s.add_argument("--max-steps", type=int, default=10, help="step budget per episode (default 10)")
    s.add_argument("--timeout-s", type=float, default=None,
                   help="wall-clock limit per episode (default: 60, or 1 s per step of --max-steps where longer)")
    s.add_argument("--run-id", default="", help="task_id prefix (default: a fresh one per submission)")
    s.add_argument("--file", default="", help="a JSONL file of TaskSpecs, one per line")
    add_arguments(s.add_argument_group("platform settings"), Settings)
    s.set_defaults(func=cmd_tasks_submit)
    ls = tsub.add_parser("list", help="list the tasks a suite offers")
    ls.add_argument("--suite", default="miniwob", choices=("miniwob", "desktop", "games"))
    ls.set_defaults(func=cmd_tasks_list)
    tasks.set_defaults(func=lambda args: tasks.print_help() or 2)
