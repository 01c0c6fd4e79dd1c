"""Chaos: the whole pipeline keeps every guarantee while each stage, or a broker, is SIGKILLed.

The demo's own processes (sink, Faust app, trainer, a rollout worker with browser sandboxes) run
on a fresh topic prefix. While episodes flow, each of rollout, streams, trainer and sink is
SIGKILLed once while busy and started again. Then, counting from the topics and ClickHouse:

- every submitted task has an ended episode (a killed execution is re-run under a new id);
- no (episode, step) slot was published with two different contents;
- no RL episode was trained on twice (the trainer's ledger, with no staleness pruning);
- nothing reached the dead-letter topic;
- the trajectories in ClickHouse (FINAL) equal the episodes that closed on flywheel.steps.v1.

A second run is the scale-out run: three brokers (replication 3, min.insync.replicas 2), every
stage twice (2 rollout workers, 2 Faust workers and 2 sinks in their consumer groups, the trainer
on 2 torch.distributed ranks), and one broker SIGKILLed under the running pipeline; the same
counts must hold. Bounded: about 2-4 minutes each on a 2-core machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
import uuid
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["click-test", "click-test-2"]
EPISODES_PER_TASK = 40


def _records(settings, spec):
    from infra.runtime.kafka_clients import read_to_end
    from infra.runtime.topics import topic_name

    return list(read_to_end(settings, topic_name(spec, settings), timeout_s=60))


def _episode_events(settings):
    from infra.runtime.topics import TOPICS
    from schemas.codec import decode
    from schemas.events import EpisodeEvent

    return [decode(m.value(), EpisodeEvent) for m in _records(settings, TOPICS.steps)]


def _every_started_episode_closed(settings) -> bool:
    """Each execution started on flywheel.steps.v1 has its trajectory on flywheel.trajectories.v1
    (a killed one's closed as abandoned by the stream processors)."""
    from infra.runtime.topics import TOPICS
    from schemas.codec import decode
    from schemas.events import Trajectory

    started = {ev.episode_id for ev in _episode_events(settings) if ev.kind == "started"}
    closed = {decode(m.value(), Trajectory).episode_id for m in _records(settings, TOPICS.trajectories)}
    return started <= closed


def _sinks_caught_up(settings) -> bool:
    """The sinks' group committed everything on every topic it reads, trajectories included: what
    they read is in ClickHouse (a sink commits after its insert)."""
    from infra.runtime.admin import consumer_lag
    from infra.runtime.topics import TOPICS, topic_name

    try:
        lags = consumer_lag(settings, f"{settings.topic_prefix}sink")
    except Exception:  # noqa: BLE001 - a broker just killed (the scale-out run): ask again
        return False
    return (any(topic_name(TOPICS.trajectories, settings) in topics for topics in lags.values())
            and all(n == 0 for topics in lags.values() for n in topics.values()))


def _kill(child) -> None:
    os.killpg(child.proc.pid, signal.SIGKILL)
    child.proc.wait(30)


def _closed_tasks(settings) -> set[str]:
    task_of, closed = {}, set()
    for ev in _episode_events(settings):
        if ev.kind == "started":
            task_of[ev.episode_id] = ev.task.task_id
        elif ev.kind == "ended" and ev.episode_id in task_of:
            closed.add(task_of[ev.episode_id])
    return closed


def run_under_chaos(settings, tmp_path, disrupt, scale: int = 1) -> str:
    """Run the pipeline (``scale`` processes of every stage), call ``disrupt(children)`` once
    episodes flow, then count; -> a summary line."""
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("Debian chromium is not installed (bash infra/run.sh installs it as root)")
    from app.demo_children import child_env, plan_children
    from app.demo_config import DemoConfig
    from app.phases import submit
    from producers.suites import plan
    from infra.runtime.procs import wait_until
    from infra.runtime.topics import TOPICS
    from infra.runtime.checkpoint import TrainedIds
    from trainer.rl.streaming_ppo import checkpoint_path, load_checkpoint

    policy = f"pixel-chaos-{uuid.uuid4().hex[:6]}"
    cfg = DemoConfig(tasks=TASKS, episodes=EPISODES_PER_TASK, max_steps=2, sandboxes=2 if scale == 1 else 1,
                     batch_episodes=8, workers=scale, cold_start_demos=0, value_pretrain_batches=0,
                     trainer_args="--max-staleness 1000 --max-wait-s 5 --epochs 2 --torch-threads 1"
                                  + (f" --nproc-per-node {scale}" if scale > 1 else ""),
                     # the killed rollout's partial execution is closed as abandoned within the test
                     streams_args="--abandoned-timeout-s 20 --abandoned-scan-s 2")
    logs = tmp_path / "logs"
    children = {}
    for c in plan_children(cfg, settings, settings.topic_prefix, policy, logs, plan(TASKS, cfg.max_steps)):
        children[c.name] = c
        for i in range(1, scale if c.name in ("sink", "streams") else 1):  # more members of its group
            children[f"{c.name}-{i}"] = replace(c, name=f"{c.name}-{i}", log_path=logs / f"{c.name}-{i}.log")
    env = child_env(settings, settings.topic_prefix)
    try:
        for name in [n for n in children if not n.startswith("rollout")]:
            children[name].start()
        from infra.runtime import versions

        assert wait_until(lambda: versions.latest(settings, policy) is not None, 180, 1.0), \
            children["trainer"].tail(10)
        for i in range(scale):
            children[f"rollout-{i}"].start()
        t0 = time.monotonic()
        submit({**os.environ, **env}, logs, TASKS, EPISODES_PER_TASK, cfg.max_steps, 0)

        assert wait_until(lambda: len(_records(settings, TOPICS.steps)) >= 20, 180, 2.0), \
            children["rollout-0"].tail(10)
        disrupt(children)

        submitted = len(TASKS) * EPISODES_PER_TASK
        assert wait_until(lambda: len(_closed_tasks(settings)) >= submitted, 240, 5.0), \
            f"tasks without an ended episode after chaos; rollout log: {children['rollout-0'].tail(10)}"
        rollout_s = time.monotonic() - t0
        # the streams close the abandoned partial (--abandoned-timeout-s 20), the sinks write
        # what is in flight
        assert wait_until(lambda: _every_started_episode_closed(settings), 90, 3.0), children["streams"].tail(10)
        assert wait_until(lambda: _sinks_caught_up(settings), 120, 3.0), children["sink"].tail(10)
    finally:
        for child in reversed(list(children.values())):
            child.stop(grace=60 if child.name.startswith("sink") else 30)

    events = _episode_events(settings)
    slots: dict[tuple[str, int], set] = defaultdict(set)
    closes: dict[str, int] = defaultdict(int)
    started = {ev.episode_id for ev in events if ev.kind == "started"}
    for ev in events:
        if ev.kind == "step":
            content = (ev.action.model_dump_json() if ev.action else None, round(ev.logprob, 6), ev.policy_version,
                       ev.observation.screenshot.sha256)
            slots[(ev.episode_id, ev.step_index)].add(content)
        elif ev.kind in ("ended", "aborted"):
            closes[ev.episode_id] += 1
    mixed = {k: v for k, v in slots.items() if len(v) > 1}
    assert not mixed, f"{len(mixed)} (episode, step) slots carry two contents: {list(mixed)[:3]}"
    assert len(_closed_tasks(settings)) == len(TASKS) * EPISODES_PER_TASK

    state = load_checkpoint(checkpoint_path(settings, policy))
    ledger = TrainedIds.model_validate(state["trained"])
    assert ledger.total == len(ledger.recent) > 0, "an RL episode was trained twice (or nothing was trained)"

    from schemas.codec import decode
    from schemas.events import DeadLetter

    dead = [decode(m.value(), DeadLetter) for m in _records(settings, TOPICS.dlq)]
    assert dead == [], "dead letters after chaos: " + "; ".join(
        f"{d.stage} {d.error_type}: {d.message[:300]} ({d.source_topic})" for d in dead[:3])

    from infra.clickhouse.client import make_client

    client = make_client(settings)
    try:
        in_ch = client.query(f"SELECT count() FROM trajectories FINAL WHERE policy = '{policy}'").result_rows[0][0]
    finally:
        client.close()
    # every started execution becomes one trajectory: ended, aborted, or closed as abandoned
    assert in_ch == len(started), f"ClickHouse has {in_ch} trajectories for {len(started)} started episodes"
    assert all(n == 1 for n in closes.values()), "an episode was closed twice"
    return (f"{len(started)} episodes started ({len(started) - len(closes)} interrupted and closed as "
            f"abandoned), {len(slots)} step slots, {ledger.total} RL episodes trained once, "
            f"{in_ch} trajectories in ClickHouse; {len(slots) / rollout_s:.1f} steps/s from submission "
            f"to the last task closed ({rollout_s:.0f} s, {scale} process(es) per stage)")


def test_sigkill_every_stage_loses_mixes_and_double_counts_nothing(settings, tmp_path):
    def kill_each_stage(children):  # SIGKILL each stage once while it is busy, and start it again
        for name in ("rollout-0", "streams", "trainer", "sink"):
            _kill(children[name])
            time.sleep(1.0)
            children[name].start()
            time.sleep(8.0)  # let it get busy again before the next kill

    print("chaos, every stage killed once:", run_under_chaos(settings, tmp_path, kill_each_stage))


def test_scale_out_on_three_brokers_with_a_broker_killed_loses_nothing(kafka_libs, tmp_path):
    from infra.runtime.admin import ensure_topics
    from infra.kafka.broker import LocalCluster, free_port_block
    from infra.runtime.settings import load_settings

    port = free_port_block(6)
    cluster = LocalCluster(tmp_path / "kafka", kafka_libs, 3, port, port + 1)
    cluster.start()
    try:
        settings = load_settings({"data_dir": str(tmp_path / "data"), "kafka_bootstrap": cluster.bootstrap,
                                  "replication_factor": 3, "topic_prefix": f"c{uuid.uuid4().hex[:6]}."}, env={})
        assert not ensure_topics(settings).drift

        def kill_a_broker(children):
            from infra.runtime.procs import wait_until
            from infra.runtime.topics import TOPICS

            # once every stage is past its start-up (records reach flywheel.rl.v1), not during it
            assert wait_until(lambda: len(_records(settings, TOPICS.rl)) >= 5, 180, 2.0), children["streams"].tail(10)
            cluster.kill(2)  # replication 3, min.insync.replicas 2: the pipeline carries on
            time.sleep(15.0)

        print("scale-out (2 of every stage), one of three brokers killed:",
              run_under_chaos(settings, tmp_path, kill_a_broker, scale=2))
    finally:
        cluster.stop()
