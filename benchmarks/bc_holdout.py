"""Behaviour cloning checked on demonstrations it did not see: clone a run's V(s) = 1
demonstrations of each task but the last few (by episode id), then report the greedy match
(``trainer.policies.pixel.bc.greedy_match``: the same action, a pointer within one grid cell) on
the training steps and on the held-out episodes, for each learning rate asked for.

    FLYWHEEL_DATA_DIR=var python -m benchmarks.bc_holdout --demonstrator scripted-pixel-g35t \\
        --suite games [--held-out 4] [--lrs 1e-2,1e-3] [--epochs 15] [--policy-config JSON] [--out var/bc_holdout.json]

It reads the run's data where the run left it (ClickHouse's ``steps`` and ``scored``, the blob
store's screenshots); nothing else needs to run. The clone is ``flywheel bc``'s own
(``trainer.sft.bc.bc_train``, the pixel policy the suite's run builds, ``examples`` for the
inputs), so a rate that wins here is the one to give the suite (``producers.suites.Suite.bc_args``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from pydantic import TypeAdapter

from app.report import query
from infra.runtime.config import ConfigError, json_object
from infra.runtime.policy import PastStep, SeenScreen, build_policy
from infra.runtime.settings import Settings
from producers.suites import get_suite, hotkeys
from schemas.actions import Action
from schemas.blobs import BlobStore
from schemas.events import BlobRef
from trainer.policies.pixel.bc import greedy_match
from trainer.policies.pixel.config import pixel_config
from trainer.sft.bc import bc_train, examples
from trainer.sft.holdout import split

STEPS_SQL = """
SELECT s.episode_id, sc.task_name, s.step_index, s.action, s.sampled, s.instruction, s.screenshot_sha256,
       s.screen_width, s.screen_height
FROM steps AS s FINAL
INNER JOIN (SELECT episode_id, task_name FROM scored FINAL WHERE policy = {policy} AND verdict = 1) AS sc
  ON s.episode_id = sc.episode_id
ORDER BY s.episode_id, s.step_index
"""


@dataclass(frozen=True)
class IndexedStep(PastStep):
    """A past step with its index in the episode (what ``examples`` leaves noise steps out by)."""

    step_index: int = 0


def demonstrations(settings: Settings, policy: str) -> dict[str, list[SimpleNamespace]]:
    """Per task, the V(s) = 1 episodes of ``policy`` in episode-id order, each shaped as
    ``examples`` reads a demonstration (``.trajectory.steps``, as a policy sees them)."""
    literal = "'" + policy.replace("\\", "\\\\").replace("'", "\\'") + "'"
    _, rows = query(settings, STEPS_SQL.format(policy=literal))
    parse = TypeAdapter(Action).validate_json
    episodes: dict[str, SimpleNamespace] = {}
    sampled: dict[str, list[int]] = defaultdict(list)
    for episode, task, index, action, was_sampled, instruction, sha, width, height in rows:
        t = episodes.setdefault(episode, SimpleNamespace(episode_id=episode, task=SimpleNamespace(name=task), steps=[]))
        screen = SeenScreen(BlobRef(sha256=sha, uri=f"blob:{sha}"), width, height, instruction)
        t.steps.append(IndexedStep(observation=screen, thought="", raw_output="", action=parse(action), step_index=index))
        if was_sampled:
            sampled[episode].append(index)
    for episode, t in episodes.items():  # a demonstration's sampled steps are its noise (Trajectory.noise_steps)
        t.noise_steps = sampled[episode] if len(sampled[episode]) < len(t.steps) else []
    by_task: dict[str, list[SimpleNamespace]] = defaultdict(list)
    for episode in sorted(episodes):
        by_task[episodes[episode].task.name].append(SimpleNamespace(trajectory=episodes[episode]))
    return dict(by_task)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demonstrator", required=True, help="the demonstrations' policy name, e.g. scripted-pixel-g35t")
    ap.add_argument("--suite", default="games", help="the suite whose pixel policy is cloned (its heads and keys)")
    ap.add_argument("--held-out", type=int, default=4, help="episodes per task kept out of the clone")
    ap.add_argument("--lrs", default="1e-2,1e-3", help="learning rates to compare, comma-separated")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--minibatch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policy-config", default="", help="JSON over the suite's pixel config, e.g. '{\"keypoints\": false}'")
    ap.add_argument("--out", type=Path, default=None, help="write the table as JSON here too")
    args = ap.parse_args()
    try:
        overrides = json_object(args.policy_config, "--policy-config")
    except ConfigError as exc:
        raise SystemExit(f"bc_holdout: {exc}") from None
    settings = Settings()
    store = BlobStore(settings.blob_root)
    by_task = demonstrations(settings, args.demonstrator)
    if not by_task:
        raise SystemExit(f"bc_holdout: no V(s) = 1 episode of {args.demonstrator!r} in ClickHouse")
    train, test = split(by_task, args.held_out)
    config = {**pixel_config(get_suite(args.suite).action_types, overrides, hotkeys()), "seed": args.seed}
    results = []
    for lr in [float(x) for x in args.lrs.split(",")]:
        policy = build_policy("pixel", "pixel-holdout", config)
        train_data, test_data = examples(policy, train, store), examples(policy, test, store)
        t0 = time.monotonic()
        losses = bc_train(policy, train_data, args.epochs, lr, args.minibatch, args.seed)
        row = {"lr": lr, "epochs": args.epochs, "seconds": round(time.monotonic() - t0, 1), "loss": round(losses[-1], 4),
               "train_steps": len(train_data.actions), "test_steps": len(test_data.actions),
               "train": greedy_match(policy, train_data), "held_out": greedy_match(policy, test_data)}
        results.append(row)
        print(f"lr {lr:g}: loss {row['loss']:.3f} in {row['seconds']:.0f} s; greedy match train / held out:", flush=True)
        for task in sorted(by_task):
            print(f"  {task:24s} {row['train'][task]:.3f} / {row['held_out'][task]:.3f}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"demonstrator": args.demonstrator, "held_out": args.held_out, "config": config,
                                        "episodes": {t: len(e) for t, e in by_task.items()}, "results": results}, indent=1))


if __name__ == "__main__":
    main()
