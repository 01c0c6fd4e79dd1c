"""The main job's phases, as UI-TARS-2 runs them: cold start -> SFT -> value pretraining -> PPO
(-> DPO on reflection pairs).

- **cold start**: the scripted solvers (producers.scripted) play the annotators. A rollout worker
  with the scripted backend runs ``cold_start_demos`` episodes per task through the normal
  pipeline (steps -> trajectories -> scored, V(s)=1 routed to flywheel.sft.v1) under the policy
  name ``scripted-<policy>``, on seeds the RL phase never uses. Only tasks with a demonstrator are
  played (``cold_start_plan``, decided before anything starts); the others go straight to RL, and
  with none at all the run starts from random weights. With ``--demos-from human`` the people's
  demonstrations recorded beforehand in `flywheel ui`'s Annotate view (``human:<name>``, on the
  platform's flywheel.sft.v1) are copied onto the run's instead, and their tasks are the ones
  with a demonstrator.
- **SFT**: ``flywheel bc`` clones those demonstrations into the pixel or the language policy and
  publishes pi_sft as the run policy's next version.
- **value pretraining**: the PPO trainer starts from pi_sft and trains only its critic on pi_sft's
  own rollouts until ``ppo.value_pretrain_done`` says it converged; no version is published
  meanwhile, so the acting policy stays pi_sft. From random weights it is off unless asked for
  (the random policy's returns are not the ones PPO goes on to earn).
- **PPO**: from the first version the trainer publishes after that.
- **DPO** (UI-TARS's reflection tuning, when ``dpo_minutes`` > 0): during PPO, ``flywheel
  annotate`` turns failed episodes (flywheel.ct.v1) into error-correction and post-reflection
  pairs (flywheel.pairs.v1). For the last ``dpo_minutes`` the PPO trainer stops and the rollout
  workers pause, ``flywheel dpo`` trains pi_sft on those pairs with pi_sft as the reference and
  publishes the result; the workers start again and act with it until the run ends. So PPO and DPO are each measured against
  the same pi_sft.

The wall-clock of each phase is kept by ``PhaseClock``; measuring the phases (the SQL the report
and the benchmarks read) lives apart, in app.measures.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from app import demo_queries as Q
from app import run_config
from infra.runtime.errors import UserError
from infra.runtime.procs import Child, flywheel_argv
from infra.runtime.policy import policy_kind
from trainer.sft.rft import annotator_of
from producers.scripted import SOLVERS
from producers.suites import child_args, hotkeys
from infra.runtime.topics import TOPICS, topic_name
from infra.runtime.probe import probe_brokers
from schemas.events import ScoredTrajectory
from schemas.codec import encode
from infra.runtime import versions
from infra.runtime.dlq import read_snapshot
from infra.runtime.kafka_clients import (DeliveryTracker, client_config, commit_offsets, flush_or_raise, high_watermarks,
                                         make_consumer, make_producer)
from producers.human import HUMAN

COLD_START, SFT, VALUE_PRETRAIN, PPO, DPO = "cold start", "SFT", "value pretraining", "PPO", "DPO"
DEMO_SEED_BASE = 10_000_000  # demonstrations use seeds the RL tasks (seed * 100_000 + k) never reach


def scripted_policy(policy: str) -> str:
    """The annotator's policy name (the trainer's RFT rounds read its demonstrations by it)."""

    return annotator_of(policy)


def rl_seed(seed: int) -> int:
    return seed * 100_000


@dataclass
class Stop:
    """Why the run stops before its deadline, set once and read by every phase: a signal (Ctrl-C,
    SIGTERM, SIGHUP: app.demo's handler sets it, then interrupts whatever blocks) or the run's goal
    reached (--until-target, --until-version). ``interruptible``: the processes are stopped and the
    report is being written, so a further signal may skip the rest of it."""

    event: threading.Event = field(default_factory=threading.Event)
    reason: str = ""
    interruptible: bool = False

    def set(self, reason: str) -> bool:
        """Stop for ``reason``; False when the run was already stopping (the first reason stays)."""
        if self.event.is_set():
            return False
        self.reason = reason
        self.event.set()
        return True

    def is_set(self) -> bool:
        return self.event.is_set()


def current_phase(published: int | None, base_version: int, value_pretrain: bool) -> str:
    """The training phase, from the newest published version: until the trainer publishes past
    the version it started from (pi_sft, or the random init), its updates are critic-only when
    value pretraining is on."""
    if published is None or published <= base_version:
        return VALUE_PRETRAIN if value_pretrain else PPO
    return PPO


@dataclass
class PhaseClock:
    """Wall-clock of each phase: ``enter`` ends the current one."""

    spans: list[tuple[str, float, float | None, str]] = field(default_factory=list)

    def enter(self, name: str, detail: str = "", at: float | None = None) -> None:
        now = time.time() if at is None else at
        if self.spans and self.spans[-1][0] == name:
            return
        self.close(now)
        self.spans.append((name, now, None, detail))

    def note(self, detail: str) -> None:
        if self.spans:
            name, start, end, _ = self.spans[-1]
            self.spans[-1] = (name, start, end, detail)

    def close(self, at: float | None = None) -> None:
        if self.spans and self.spans[-1][2] is None:
            name, start, _, detail = self.spans[-1]
            self.spans[-1] = (name, start, time.time() if at is None else at, detail)

    @property
    def current(self) -> str:
        return self.spans[-1][0] if self.spans else "-"

    def rows(self) -> list[dict]:
        return [{"phase": n, "started_at": s, "seconds": round((e or time.time()) - s, 1), "detail": d}
                for n, s, e, d in self.spans]


# ---------------------------------------------------------------- the cold start and SFT phases

DEMOS_PER_TASK = 20  # the cold start's demonstrations per task when --cold-start-demos is left on auto


@dataclass(frozen=True)
class ColdStart:
    """What the cold start does over a run's tasks: ``per_task`` demonstrations (0: none, the
    run starts from random weights) of each task in ``demonstrated``; the tasks in ``rl_only``
    have no demonstrator and are learnt by PPO alone (pi_sft never saw them); ``lines`` say so,
    printed before anything starts."""

    per_task: int
    demonstrated: tuple[str, ...]
    rl_only: tuple[str, ...]
    lines: tuple[str, ...]


def demonstrators() -> frozenset[str]:
    """The tasks a demonstrator can play for the cold start: the scripted solvers'."""

    return frozenset(SOLVERS)


def cold_start_plan(tasks: list[str] | tuple[str, ...], asked: int, demonstrable: frozenset[str] | set[str]) -> ColdStart:
    """Decide the cold start before anything runs. ``asked`` is ``--cold-start-demos``: -1 (auto)
    takes ``DEMOS_PER_TASK`` demonstrations of every task in ``demonstrable`` and sends the others
    straight to RL, or starts from random weights when no task has a demonstrator; 0 starts from
    random weights; N > 0 asks for N demonstrations of every task, and a task without a
    demonstrator is then a UserError naming it and the choices."""
    missing = tuple(t for t in tasks if t not in demonstrable)
    have = tuple(t for t in tasks if t in demonstrable)
    named = ", ".join(missing)
    if asked == 0:
        return ColdStart(0, (), tuple(tasks), ("no cold start (--cold-start-demos 0): every task from random weights"
                                               + (f"; no demonstrator for {named}" if missing else ""),))
    if asked > 0 and missing:
        raise UserError(
            f"--cold-start-demos {asked} asks for demonstrations of every task, and no demonstrator can play {named} "
            f"(there is one for {', '.join(have) or 'none of them'}). Choose: leave those tasks out of "
            "--tasks; --cold-start-demos -1 (demonstrations where there is a demonstrator, PPO alone on the rest); "
            "or --cold-start-demos 0 (every task from random weights)")
    per_task = asked if asked > 0 else DEMOS_PER_TASK
    if not have:
        return ColdStart(0, (), tuple(tasks), (
            f"no task has a demonstrator ({named}): starting from random weights (no cold start, no SFT; value "
            "pretraining off unless --value-pretrain-batches is given)",))
    lines = (f"cold start: {per_task} demonstrations of each of {', '.join(have)}",)
    if missing:
        lines += (f"no demonstrator for {named}: pi_sft is cloned from the other tasks' demonstrations and has never "
                  "seen these; PPO trains on every task",)
    return ColdStart(per_task, have, missing, lines)


def count_scored(settings, policy: str) -> int:
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.query import execute

    _, rows, _ = execute(settings, f"SELECT count() FROM scored FINAL WHERE policy = {Q.q(policy)} AND {Q.own_scorer(policy)}")
    return int(rows[0][0]) if rows else 0


def demonstration_steps(settings, policy: str) -> int:
    """Steps of the successful scripted demonstrations of the run of ``policy`` (what `flywheel bc` clones)."""
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.query import execute

    name = scripted_policy(policy)
    _, rows, _ = execute(settings, f"SELECT sum(num_steps) FROM scored FINAL WHERE policy = {Q.q(name)} "
                                   f"AND {Q.own_scorer(name)} AND success")
    return int(rows[0][0] or 0) if rows else 0


def wait_for_sft(settings, scripted: str, timeout_s: float = 60.0) -> int:
    """Wait until flywheel.sft.v1 holds a record per successful demonstration ClickHouse has
    scored (the router writes it beside the scored record; nothing else writes there yet);
    -> records on the topic."""
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.query import execute

    _, rows, _ = execute(settings, f"SELECT countIf(success) FROM scored FINAL WHERE policy = {Q.q(scripted)} "
                             f"AND {Q.own_scorer(scripted)}")
    want = int(rows[0][0]) if rows else 0
    consumer = make_consumer(settings, f"probe-{scripted}")
    try:
        end, have = time.time() + timeout_s, 0
        while time.time() < end:
            have = sum(high_watermarks(consumer, topic_name(TOPICS.sft, settings)).values())
            if have >= want:
                break
            time.sleep(1.0)
        return have
    finally:
        consumer.close()


def demonstrate(cfg, settings, env: dict[str, str], prefix: str, policy: str, tasks: list[str], max_steps: int,
                logs: Path, clock: PhaseClock, stop: Stop, deadline: float | None = None) -> int:
    """Run the scripted annotator on ``cfg.cold_start_demos`` episodes per task and wait until
    they are scored (the sink saw them, so flywheel.sft.v1 holds the successes), or until
    ``deadline`` (epoch seconds: the cold start's share of the run); -> episodes."""
    name = scripted_policy(policy)
    clock.enter(COLD_START, f"{cfg.cold_start_demos} scripted demonstrations per task")
    worker = Child("annotator", flywheel_argv(
        "rollout", "--sandboxes", str(cfg.sandboxes), "--policy-backend", "scripted", "--policy-name", name,
        "--worker-id", "annotator", "--group-id", f"{prefix}rollout", "--demo-noise", str(cfg.demo_noise),
        *cfg.rollout_args.split(),
    ), logs / "annotator.log", env).start()
    want = cfg.cold_start_demos * len(tasks)
    try:
        submit(env, logs, tasks, cfg.cold_start_demos, max_steps, DEMO_SEED_BASE + cfg.seed * 1000)
        deadline = min(time.time() + max(300.0, 6.0 * want), math.inf if deadline is None else deadline)
        last, last_change = -1, time.time()
        while not stop.is_set() and time.time() <= deadline:
            time.sleep(cfg.progress_s)
            if not worker.alive:
                raise UserError(f"the scripted annotator exited with code {worker.returncode()}: {worker.tail(3)}")
            try:
                done = count_scored(settings, name)
            except Exception:  # noqa: BLE001 - the sink may be starting
                continue
            print(f"[{clock.current}] demonstrations scored {done}/{want}", flush=True)
            if done != last:
                last, last_change = done, time.time()
            # all of them, or the few that never end (a sandbox crash is retried, not scored twice)
            if done >= want or (done >= 0.9 * want and time.time() - last_change > 30) or time.time() > deadline:
                break
        wait_for_sft(settings, name)
        return last
    finally:
        worker.stop(grace=30)


def human_demonstrations(settings, timeout_s: float = 60.0, asked: str = "--demos-from human") -> list:
    """``--demos-from human`` (or what ``asked`` names): the successful ``human:<name>``
    demonstrations on ``settings``' flywheel.sft.v1 (the platform's topics, where `flywheel ui`'s
    Annotate view records them); UserError when no broker answers (they can only have been
    recorded on a running platform)."""
    if probe_brokers(client_config(settings), timeout=5.0) is None:
        raise UserError(f"{asked} reads the demonstrations recorded in `flywheel ui` from the running "
                        f"platform's Kafka ({settings.bootstrap}), which does not answer: `flywheel up` first")
    return [s for s in read_snapshot(settings, TOPICS.sft, ScoredTrajectory, "demo", timeout_s)
            if s.trajectory.policy.startswith(HUMAN + ":")]


def import_demonstrations(settings, demos: list, tasks: list[str], clock: PhaseClock) -> int:
    """The cold start of ``--demos-from human``: the people's demonstrations of ``tasks`` copied
    onto this run's flywheel.sft.v1 (acknowledged), where `flywheel bc` and RFT read the scripted
    ones; -> how many."""
    chosen = [s for s in demos if s.trajectory.task.name in tasks]
    clock.enter(COLD_START, f"{len(chosen)} human demonstrations recorded in flywheel ui")
    producer, tracker, topic = make_producer(settings), DeliveryTracker(), topic_name(TOPICS.sft, settings)
    for s in chosen:
        producer.produce(topic, key=s.episode_id.encode(), value=encode(s), on_delivery=tracker)
    flush_or_raise(producer, tracker)
    return len(chosen)


def skip_leftover_tasks(settings, group: str) -> dict[int, int]:
    """Commit the rollout group's offsets on the tasks topic at its end: demonstration tasks the
    annotator left unplayed (it stops at 90% after a quiet spell, or at its deadline) must not
    reach the RL workers, which join the same group. Called with the annotator stopped (the
    group empty); -> the committed offset per partition."""
    from confluent_kafka import TopicPartition

    topic = topic_name(TOPICS.tasks, settings)
    consumer = make_consumer(settings, group, **{"enable.auto.commit": False})
    try:
        ends = high_watermarks(consumer, topic)
        commit_offsets(consumer, [TopicPartition(topic, p, o) for p, o in ends.items()])
        return ends
    finally:
        consumer.close()


def kind_config(cfg, action_types: tuple[str, ...]) -> dict:
    """The policy config the run's ``flywheel bc`` and trainer build from: how the kind reads
    MiniWoB++ pages (and the pixel policy's heads for ``action_types``), ``--policy-config`` last."""
    overrides = cfg.policy_overrides()
    return policy_kind(cfg.policy_kind).task_config(action_types, overrides, keys=hotkeys())


def bc_options(cfg, policy: str, tasks: list[str], action_types: tuple[str, ...]) -> list[str]:
    """`flywheel bc`'s options in the cold start: the demo's, the suites' for this policy kind
    (``producers.suites.child_args``), then the user's --bc-args (the last wins)."""
    return ["--policy-kind", cfg.policy_kind, "--policy-name", policy, "--tasks", ",".join(tasks),
            "--demos-per-task", str(cfg.cold_start_demos), "--seed", str(cfg.seed),
            "--policy-config", json.dumps(kind_config(cfg, action_types)),
            *(["--demos-from", cfg.demos_from] if cfg.demos_from == "human" else []),
            "--torch-threads", str(idle_cores()), *child_args("bc", tasks, cfg.policy_kind), *cfg.bc_args.split()]


def clone(cfg, env: dict[str, str], policy: str, tasks: list[str], action_types: tuple[str, ...], logs: Path,
          clock: PhaseClock, epochs: int | None = None, timeout_s: float = 3600, train_budget_s: float = 0.0) -> str:
    """``flywheel bc`` on the run's flywheel.sft.v1: publishes pi_sft; -> its summary line. Its
    configuration, resolved from ``bc_options``, is handed whole as one file in the run's folder
    (``BC_FILE``, beside ``logs``). ``epochs``: fewer than asked, to fit SFT's share of the run
    (over the user's --bc-args); ``train_budget_s``: no epoch starts past it; past ``timeout_s`` it is
    stopped (UserError)."""
    clock.enter(SFT, "behaviour cloning of the demonstrations")
    print(f"[{SFT}] flywheel bc --policy-kind {cfg.policy_kind}{'' if epochs is None else f' --epochs {epochs}'} "
          f"(progress in {logs / 'bc.log'})", flush=True)
    argv = run_config.bc_handed(bc_options(cfg, policy, tasks, action_types), {**os.environ, **env},
                                logs.parent / BC_FILE, epochs, train_budget_s)
    line = _run_step("bc", flywheel_argv("bc", *argv), env, logs, timeout_s=timeout_s)
    clock.note(line)
    print(f"[{SFT}] {line}", flush=True)
    return line


BC_FILE = "bc.json"  # in the run's folder: `flywheel bc --config`'s, the cloning's whole configuration


def idle_cores() -> int:
    """Threads for a blocking step (SFT, DPO): the children keep one OpenMP thread each, but
    while this step runs the trainer is not, so it may use every core."""
    return max(os.cpu_count() or 1, 1)


def step_failure(name: str, rc: int, log_text: str, path: Path) -> str:
    """One line for a failed step (it goes into the report's phase table): how it ended and
    the log's last line."""
    how = f"exit {rc}"
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:  # a real-time signal has no name
            sig = f"signal {-rc}"
        how = f"killed by {sig}" + (" (out of memory? see the kernel log)" if rc == -signal.SIGKILL else "")
    last = next((ln.strip() for ln in reversed(log_text.splitlines()) if ln.strip()), "no output")
    return f"flywheel {name} failed ({how}); its last line: {last[-300:]} (log {path})"


def _run_step(name: str, argv: list[str], env: dict[str, str], logs: Path, timeout_s: float = 3600,
              tick=None, every_s: float = 5.0) -> str:
    """One blocking `flywheel` step, its output going to ``<logs>/<name>.log`` as it runs (its
    progress can be followed there); ``tick()`` is called every ``every_s`` while it runs (the
    demo's progress line). -> its "published ..." line. UserError with the log's last line on
    failure or past ``timeout_s``."""
    path = logs / f"{name}.log"
    with open(path, "wb") as out:
        proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    rc = proc.wait(timeout=max(0.01, min(every_s, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        raise UserError(f"flywheel {name} took longer than {timeout_s:.0f}s and was stopped (log {path})") from None
                    if tick is not None:
                        tick()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = path.read_text(errors="replace")
    if rc != 0:
        raise UserError(step_failure(name, rc, text, path))
    return next((ln for ln in text.splitlines() if ln.startswith("published")), text.strip()[-200:])


def reflection_annotator(env: dict[str, str], prefix: str, logs: Path, rollout_args: str) -> Child:
    """`flywheel annotate` over the run's failed episodes (flywheel.ct.v1 -> flywheel.pairs.v1)."""
    args = rollout_args.split()
    # the replay must wait as long per step as the rollout did, or the screens diverge
    step_ms = args[args.index("--step-ms") + 1:args.index("--step-ms") + 2] if "--step-ms" in args else []
    return Child("reflection", flywheel_argv("annotate", "--group-id", f"{prefix}annotate",
                                             *(["--step-ms", *step_ms] if step_ms else [])),
                 logs / "reflection.log", env)


def count_pairs(settings) -> int:
    consumer = make_consumer(settings, "probe-pairs")
    try:
        return sum(high_watermarks(consumer, topic_name(TOPICS.pairs, settings)).values())
    finally:
        consumer.close()


def dpo(cfg, settings, env: dict[str, str], policy: str, reference: int, logs: Path, clock: PhaseClock,
        timeout_s: float = 3600, tick=None) -> int | None:
    """``flywheel dpo`` from pi_sft (``reference``) on the pairs annotated so far; -> the version
    it published (None when there was no pair: the PPO policy keeps acting)."""
    pairs = count_pairs(settings)
    clock.enter(DPO, f"DPO of pi_sft (v{reference}) on {pairs} reflection pairs")
    if pairs == 0:
        clock.note("no reflection pair was annotated: DPO skipped, the PPO policy keeps acting")
        return None
    few = policy_kind(cfg.policy_kind).demo_dpo_args  # the language policy: a sample of the pairs, few epochs
    argv = flywheel_argv("dpo", "--policy-name", policy, "--reference-version", str(reference), "--seed", str(cfg.seed),
                         "--torch-threads", str(idle_cores()), *few, *cfg.dpo_args.split())
    line = _run_step("dpo", argv, env, logs, timeout_s, tick, cfg.progress_s)
    clock.note(line)
    print(f"[{DPO}] {line}", flush=True)
    latest = versions.latest(settings, policy)
    return latest.version if latest is not None else None


def submit(env: dict[str, str], logs: Path, tasks: list[str], episodes: int, max_steps: int, seed: int) -> None:
    argv = flywheel_argv("tasks", "submit", "--suite", "miniwob", "--tasks", ",".join(tasks),
                         "--episodes", str(episodes), "--max-steps", str(max_steps), "--seed", str(seed))
    with open(logs / "tasks.log", "ab") as out:
        rc = subprocess.run(argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, timeout=600).returncode
    if rc != 0:
        raise UserError(f"task submission failed (exit {rc}); see {logs / 'tasks.log'}")


def send_tasks(settings, specs: list) -> int:
    """Produce TaskSpecs to the run's task topic and wait for the acknowledgements (the curriculum's refills)."""
    # local: loads confluent-kafka, needed only on this path
    from producers.tasks import submit as produce_tasks

    return produce_tasks(settings, specs)
