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

The phase of an episode is read from what it was acted by (``phase_sql``), so the report's
per-phase table needs no clock; the wall-clock of each phase is kept by ``PhaseClock``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from app import demo_queries as Q
from trainer.core import metric_names as M
from infra.runtime.errors import UserError
from infra.runtime.procs import Child, flywheel_argv
from infra.runtime.policy import policy_kind
from trainer.sft.rft import annotator_of
from producers.scripted import SOLVERS
from producers.suites import child_args
from infra.runtime.topics import TOPICS, topic_name
from infra.runtime.probe import probe_brokers
from schemas.events import ScoredTrajectory
from schemas.codec import encode
from infra.runtime import versions
from infra.runtime.dlq import read_snapshot
from infra.runtime.kafka_clients import DeliveryTracker, client_config, flush_or_raise, high_watermarks, make_consumer, make_producer
from producers.human import HUMAN

log = logging.getLogger("flywheel.phases")

COLD_START, SFT, VALUE_PRETRAIN, PPO, DPO = "cold start", "SFT", "value pretraining", "PPO", "DPO"
DEMO_SEED_BASE = 10_000_000  # demonstrations use seeds the RL tasks (seed * 100_000 + k) never reach


def scripted_policy(policy: str) -> str:
    """The annotator's policy name (the trainer's RFT rounds read its demonstrations by it)."""

    return annotator_of(policy)


def rl_seed(seed: int) -> int:
    return seed * 100_000


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


# an episode's measure: a game's normalised score (the trajectories row), else its success
MEASURE = "if(isNull(normalised_score), toFloat64(success), assumeNotNull(normalised_score))"


def phase_sql(policy: str, base_version: int, cold_start: bool, value_pretrain: bool,
              dpo_version: int | None = None) -> str:
    """Success per task and phase over every ended episode of the run (demonstrations included;
    a game's episode counts its normalised score, 0 = random, 1 = the heuristic, not its success),
    the phase read from the policy that acted: the scripted annotator, the version the trainer
    started from (pi_sft or the random init; during value pretraining or before the first
    update), PPO's, or (from ``dpo_version`` on) DPO's."""
    # a constant label: no input reaches it
    start = ("2 pi_sft" if cold_start else "2 random init") + (" (value pretraining)" if value_pretrain else "")
    dpo = f"policy_version_min >= {int(dpo_version)}, '4 DPO (from pi_sft)', " if dpo_version is not None else ""
    policies = f"{Q.q(policy)}, {Q.q(scripted_policy(policy))}"
    return f"""SELECT task_name, phase, count() AS episodes, round(avg(measure), 4) AS success_or_score,
    round(avg(num_steps), 2) AS mean_steps, varSamp(measure) AS measure_var
FROM (
    SELECT task_name, num_steps, {MEASURE} AS measure,
        multiIf(policy = {Q.q(scripted_policy(policy))}, '1 demonstrations (scripted)',
                policy_version_min <= {int(base_version)}, '{start}', {dpo}'3 PPO') AS phase
    FROM (SELECT episode_id, task_name, success, num_steps, policy, policy_version_min FROM scored FINAL
          WHERE policy IN ({policies}) AND NOT infra_failure AND {Q.own_scorer(policy, scripted_policy(policy))}) AS s
    LEFT JOIN (SELECT episode_id, normalised_score FROM trajectories FINAL WHERE policy IN ({policies})) AS t
        USING (episode_id)
)
GROUP BY task_name, phase ORDER BY task_name, phase"""


LAST = 100  # the "each task's last 100 episodes"
LAST_PHASE = f"3 PPO, last {LAST}"


def last_sql(policy: str, base_version: int, dpo_version: int | None = None) -> str:
    """``phase_sql``'s rows for one more phase: each task's last LAST episodes of PPO (or as many as
    it had), by when they ended; so a gain can be read at the run's end, not over the whole phase."""
    dpo = f" AND policy_version_min < {int(dpo_version)}" if dpo_version is not None else ""
    return f"""SELECT task_name, '{LAST_PHASE}' AS phase, count() AS episodes, round(avg(measure), 4) AS success_or_score,
    round(avg(num_steps), 2) AS mean_steps, varSamp(measure) AS measure_var
FROM (
    SELECT task_name, num_steps, {MEASURE} AS measure,
        row_number() OVER (PARTITION BY task_name ORDER BY ended_at DESC, episode_id) AS k
    FROM (SELECT episode_id, task_name, success, num_steps, ended_at FROM scored FINAL
          WHERE policy = {Q.q(policy)} AND NOT infra_failure AND {Q.own_scorer(policy)}
              AND policy_version_min > {int(base_version)}{dpo}) AS s
    LEFT JOIN (SELECT episode_id, normalised_score FROM trajectories FINAL WHERE policy = {Q.q(policy)}) AS t
        USING (episode_id)
)
WHERE k <= {LAST}
GROUP BY task_name ORDER BY task_name"""


def pivot(rows: list[tuple]) -> tuple[list[str], list[list[str]]]:
    """(task, phase, episodes, success, ...) rows -> a task x phase table of 'success (episodes)'."""
    phases = sorted({r[1] for r in rows})
    by_task: dict[str, dict[str, str]] = {}
    for task, phase, n, rate, *_ in rows:
        by_task.setdefault(task, {})[phase] = f"{float(rate):.2f} ({n})"
    return ["task", *phases], [[t, *(cells.get(p, "-") for p in phases)] for t, cells in sorted(by_task.items())]


def phase_gain(rows: list[tuple], before: str, after: str) -> tuple[float, float, int] | None:
    """The suite's gain from phase ``before`` to phase ``after`` (``phase_sql``'s rows): the mean over
    the tasks played in both of each task's difference in its measure (success, a game's
    normalised score), with its standard error (tasks independent; each phase's mean's variance
    from the row's sample variance when it has one, else as a binomial proportion's), and the
    number of tasks; None when no task was played in both. Per task, so a phase's task mix (the
    curriculum's) does not enter it."""
    rate = {(r[0], r[1]): (float(r[3]), int(r[2]), _sample_var(r)) for r in rows}
    tasks = sorted(t for t, ph in rate if ph == before and (t, after) in rate)
    if not tasks:
        return None
    diffs, var = [], 0.0
    for t in tasks:
        (p0, n0, v0), (p1, n1, v1) = rate[(t, before)], rate[(t, after)]
        diffs.append(p1 - p0)
        var += (p0 * (1 - p0) if v0 is None else v0) / max(n0, 1) + (p1 * (1 - p1) if v1 is None else v1) / max(n1, 1)
    return sum(diffs) / len(tasks), var ** 0.5 / len(tasks), len(tasks)


def run_gains(rows: list[tuple], last_rows: list[tuple]) -> tuple[tuple | None, tuple | None]:
    """PPO's gain over the starting policy's episodes (``phase_sql``'s rows): over the whole PPO
    phase, and over each task's last LAST episodes (``last_sql``'s rows); None where either phase
    is missing."""
    start = next((r[1] for r in sorted(rows) if str(r[1]).startswith("2 ")), None)
    if start is None:
        return None, None
    return phase_gain(rows, start, "3 PPO"), phase_gain(list(rows) + list(last_rows), start, LAST_PHASE)


def _sample_var(row: tuple) -> float | None:
    """``phase_sql``'s sample variance of the row's measure (0 for one episode); None for a row without it."""
    if len(row) < 6 or row[5] is None:
        return None
    v = float(row[5])
    return v if math.isfinite(v) else 0.0  # one episode: NaN (chDB) or inf (some servers)


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
                logs: Path, clock: PhaseClock, stop: dict) -> int:
    """Run the scripted annotator on ``cfg.cold_start_demos`` episodes per task and wait until
    they are scored (the sink saw them, so flywheel.sft.v1 holds the successes); -> episodes."""
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
        deadline, last, last_change = time.time() + max(300.0, 6.0 * want), -1, time.time()
        while not stop["flag"]:
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


def human_demonstrations(settings, timeout_s: float = 60.0) -> list:
    """``--demos-from human``: the successful ``human:<name>`` demonstrations on ``settings``'
    flywheel.sft.v1 (the platform's topics, where `flywheel ui`'s Annotate view records them);
    UserError when no broker answers (they can only have been recorded on a running platform)."""
    if probe_brokers(client_config(settings), timeout=5.0) is None:
        raise UserError(f"--demos-from human reads the demonstrations recorded in `flywheel ui` from the running "
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
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in ends.items()], asynchronous=False)
        return ends
    finally:
        consumer.close()


def kind_config(cfg, action_types: tuple[str, ...]) -> dict:
    """The policy config the run's ``flywheel bc`` and trainer build from: how the kind reads
    MiniWoB++ pages (and the pixel policy's heads for ``action_types``), ``--policy-config`` last."""
    overrides = cfg.policy_overrides()
    return policy_kind(cfg.policy_kind).task_config(action_types, overrides)


def bc_options(cfg, policy: str, tasks: list[str], action_types: tuple[str, ...]) -> list[str]:
    """`flywheel bc`'s options in the cold start: the demo's, the suites' for this policy kind
    (``producers.suites.child_args``), then the user's --bc-args (the last wins)."""
    return ["--policy-kind", cfg.policy_kind, "--policy-name", policy, "--tasks", ",".join(tasks),
            "--demos-per-task", str(cfg.cold_start_demos), "--seed", str(cfg.seed),
            "--policy-config", json.dumps(kind_config(cfg, action_types)),
            *(["--demos-from", cfg.demos_from] if cfg.demos_from == "human" else []),
            "--torch-threads", str(idle_cores()), *child_args("bc", tasks, cfg.policy_kind), *cfg.bc_args.split()]


def clone(cfg, env: dict[str, str], policy: str, tasks: list[str], action_types: tuple[str, ...], logs: Path,
          clock: PhaseClock) -> str:
    """``flywheel bc`` on the run's flywheel.sft.v1: publishes pi_sft; -> its summary line."""
    clock.enter(SFT, "behaviour cloning of the demonstrations")
    print(f"[{SFT}] flywheel bc --policy-kind {cfg.policy_kind} (progress in {logs / 'bc.log'})", flush=True)
    line = _run_step("bc", flywheel_argv("bc", *bc_options(cfg, policy, tasks, action_types)), env, logs)
    clock.note(line)
    print(f"[{SFT}] {line}", flush=True)
    return line


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


# ---------------------------------------------------------------- the report's section


PPO_START_BATCHES = 3  # the critic check pooled over PPO's first batches (a game's batch may hold 2 episodes)


def value_pretraining_summary(trainer_rows: list[tuple], batches: int = PPO_START_BATCHES) -> dict[str, float | int | None]:
    """From the run's TrainerMetrics rows (update, version, t, metrics): how many critic-only
    batches ran, the critic's explained variance at the last of them, and the critic at PPO's
    start (UI-TARS-2's failure signature is a negative value-return correlation): at the first
    PPO batch, and pooled over the first ``batches``. "PPO batch" here is one with a correlation:
    a batch of one episode, or of equal returns, has none (nothing non-finite is recorded).

    The correlation is over the batch's episodes (each one's first value against its return), so
    a batch of two long game episodes has one of +-1 whatever the critic: the pooled figure
    weighs each batch's by its episodes less two (a batch of two counts for nothing; None when
    none counts). The explained variance is over the batch's steps: weighed by its steps. Runs
    recorded without those counts get plain means."""
    rows = [(r[0], {M.current(k): v for k, v in (r[3] or {}).items()}) for r in trainer_rows]
    critic = [m for _, m in rows if m.get(M.CRITIC_ONLY) == 1]
    ppo = [m for _, m in rows if m.get(M.CRITIC_ONLY) == 0 and M.REWARD_CORR in m]
    first = ppo[:max(1, batches)]
    counted = bool(first) and all(M.EPISODES in m for m in first)
    corr = _weighted([(m[M.REWARD_CORR], max(m[M.EPISODES] - 2, 0) if counted else 1.0) for m in first])
    ev = _weighted([(m[M.EXPLAINED_VARIANCE], m.get(M.STEPS, 1.0)) for m in first if M.EXPLAINED_VARIANCE in m])
    return {"critic_only_batches": len(critic),
            "explained_variance_at_end": critic[-1].get(M.EXPLAINED_VARIANCE) if critic else None,
            "value_return_corr_at_ppo_start": ppo[0].get(M.REWARD_CORR) if ppo else None,
            "explained_variance_at_ppo_start": ppo[0].get(M.EXPLAINED_VARIANCE) if ppo else None,
            "episodes_at_ppo_start": first[0].get(M.EPISODES) if first else None,
            "ppo_start_batches": len(first),
            "ppo_start_episodes": sum(m[M.EPISODES] for m in first) if counted else None,
            "value_return_corr_ppo_start_pooled": corr,
            "explained_variance_ppo_start_pooled": ev}


def _weighted(pairs: list[tuple[float, float]]) -> float | None:
    """The weighted mean of (value, weight) pairs; None when the weights add up to nothing."""
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total > 0 else None


def critic_sentence(vp: dict) -> str:
    """The report's line on value pretraining and the critic at PPO's start (value_pretraining_summary):
    the verdict on the correlation is the pooled one's where there is one (a first batch of two
    episodes says +-1 whatever the critic)."""
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    of = lambda n: "" if n is None else f" ({int(n)} episodes)"  # noqa: E731
    pooled = vp["ppo_start_batches"] > 1 and vp["value_return_corr_ppo_start_pooled"] is not None
    first = vp["value_return_corr_at_ppo_start"]
    said = (f"Value pretraining: {vp['critic_only_batches']} critic-only batches, explained variance at their end "
            f"{fmt(vp['explained_variance_at_end'])}; at PPO's first batch{of(vp['episodes_at_ppo_start'])} the "
            f"critic's explained variance was {fmt(vp['explained_variance_at_ppo_start'])} and the value-return "
            f"correlation {fmt(first)}{'' if pooled else corr_verdict(first)}")
    if vp["ppo_start_batches"] > 1:
        said += (f"; over PPO's first {vp['ppo_start_batches']} batches{of(vp['ppo_start_episodes'])} "
                 f"{fmt(vp['explained_variance_ppo_start_pooled'])} and "
                 f"{fmt(vp['value_return_corr_ppo_start_pooled'])}"
                 f"{corr_verdict(vp['value_return_corr_ppo_start_pooled'])} (the explained variance weighed by "
                 "each batch's steps, the correlation by its episodes less two: a batch of two has one of ±1 "
                 "whatever the critic)")
    return said + "."


def corr_verdict(corr: float | None) -> str:
    """What the value-return correlation at PPO's start says (UI-TARS-2's failure signature is a
    negative one); empty when it was not measured."""
    if corr is None:
        return ""
    if corr < 0:
        return " (negative: UI-TARS-2's failure signature, the critic misleads the policy)"
    return " (positive: the critic ranks states the way the returns do)"


def report_section(settings, policy: str, base_version: int, cold_start: bool, value_pretrain: bool,
                   clock: PhaseClock, dpo_version: int | None = None) -> tuple[list[str], dict]:
    """Markdown of the phases (time, success per task and phase, value pretraining) and its data."""
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.query import execute, render

    sql = phase_sql(policy, base_version, cold_start, value_pretrain, dpo_version)
    _, rows, _ = execute(settings, sql)
    cols, table = pivot(rows)
    _, trainer_rows, _ = execute(settings, Q.trainer_metrics(policy))
    vp = value_pretraining_summary(trainer_rows)
    lines = ["## Phases", "", "| phase | minutes | what |", "|---|---|---|"]
    lines += [f"| {r['phase']} | {r['seconds'] / 60:.1f} | {r['detail']} |" for r in clock.rows()]
    lines += ["", "Success rate (episodes) per task and phase, every ended episode of the phase "
              "(sampled actions; the demonstrations are the scripted annotator's; a game's cell is its mean "
              "normalised score, 0 = the random policy, 1 = the heuristic):", "",
              "```", render(cols, table, "table") if table else "(no rows)", "```", "",
              critic_sentence(vp), "",
              "<details><summary>SQL</summary>", "", "```sql", sql, "```", "</details>", ""]
    last = last_sql(policy, base_version, dpo_version)
    try:
        _, last_rows, _ = execute(settings, last)
    except Exception as exc:  # noqa: BLE001 - the phase table above stands without it
        last_rows = []
        log.warning("each task's last %d PPO episodes not read: %s", LAST, exc)
    gain, gain_last = run_gains(rows, last_rows)
    said = []
    if gain is not None:
        said += [f"PPO's gain over the starting policy's episodes: {gain[0]:+.3f} ± {gain[1]:.3f} (standard error; the "
                 f"mean over the {gain[2]} tasks played in both phases of each task's difference in success, a game's in "
                 f"normalised score; the PPO phase's updates include the RFT and DAgger rounds the run's plan names)", ""]
    if gain_last is not None:
        said += [f"At the run's end, each task's last {LAST} PPO episodes (or as many as it had: "
                 f"{', '.join(f'{r[0]} {r[2]}' for r in last_rows)}) over the starting policy's: {gain_last[0]:+.3f} ± "
                 f"{gain_last[1]:.3f}, the same mean over tasks", ""]
    at = lines.index("<details><summary>SQL</summary>")
    lines[at:at] = said
    lines[-3:-3] = ["```", "", "```sql", last]  # a block of its own in the SQL details
    by_phase = {t[0]: dict(zip(cols[1:], t[1:])) for t in table}
    as_dict = lambda g: None if g is None else {"gain": g[0], "standard_error": g[1], "tasks": g[2]}  # noqa: E731
    return lines, {"phases": clock.rows(), "success_by_task_and_phase": by_phase, "value_pretraining": vp,
                   "base_version": base_version, "dpo_version": dpo_version, "ppo_gain": as_dict(gain), "ppo_gain_last_100": as_dict(gain_last)}
