"""`flywheel demo`: the whole closed loop on one machine, with a live progress view and a report.

Starts (or reuses) the local broker, creates the run's topics (a per-run prefix keeps runs
apart), then runs as child processes: the ClickHouse sink (owner of embedded chDB and its query
endpoint), the Faust app, the PPO trainer, and rollout workers with browser sandboxes; submits
MiniWoB++ tasks; prints one progress line every few seconds (episodes, success over the last
100 episodes per task, published vs acting policy version, trainer updates, consumer lag, dead
letters); stops on Ctrl-C, after --minutes, or (with --until-target) once every task reached its
target; writes the report and prints its path. The phases (cold start -> SFT -> value
pretraining -> PPO -> DPO) are app/phases.py's. Before anything starts it says which tasks
have no demonstrator (they go straight to RL; with none, the run starts from random weights and
skips value pretraining); whatever ends the run, it stops the processes it started.

--sync alternates rollout and training without overlap: the rollout workers collect one batch
under the current version and then wait for the next one, and the trainer updates only on a
full batch; the same report then tells the wall-clock to the target in that mode.

This module runs a run from its start to its report, and the learner's loop (progress readings,
the curriculum's task feed); its parts are apart: app.demo_config (the options and what a run
makes of them before anything starts), app.demo_children (the processes and what each is started
with), app.demo_platform (the broker and the topics), app.demo_report (the header, config.json,
the outcome and the report).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from app import demo_queries as Q
from app import demo_report, phase_list, phases, start_from, taught
from app.curriculum import EXPLORE_BELOW, WINDOW as CURRICULUM_WINDOW, TaskFeed, guide_points
from app.demo_children import Checked, check_child_options, child_env, plan_children, ui_child
from app.demo_config import RUN_ID, DemoConfig, effective, run_names
from app.demo_platform import broker_processes, broker_to_start, ensure_platform, leave_platform, stop_children
from app.demo_report import rl_outcome
from infra.kafka.broker import free_port_block
from infra.runtime import versions
from infra.runtime.admin import consumer_lag
from infra.runtime.config import describe
from infra.runtime.cpu_share import CpuShare
from infra.runtime.errors import UserError
from infra.runtime.procs import Child, say as _say, stop_signals, wait_until
from infra.runtime.settings import Settings, load_settings
from producers.capacity import machine_sandboxes
from producers.suites import RunPlan

log = logging.getLogger("flywheel.demo")


def snapshot(settings: Settings, policy: str, prefix: str) -> dict:
    """One progress reading; every part is best effort (the sink may be starting)."""
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.query import execute

    snap: dict = {"rates": {}, "episodes": 0}
    try:
        _, rows, _ = execute(settings, Q.last_n_success(policy))
        snap["rates"] = {r[0]: (r[2], r[1]) for r in rows}
        _, rows, _ = execute(settings, Q.last_n_scores(policy))
        snap["scores"] = {r[0]: (r[2], r[1]) for r in rows}  # games: normalised score, shown instead of success
        # the curriculum's reading: a shorter window, so a solved task's forgetting shows sooner
        _, rows, _ = execute(settings, Q.last_n_success(policy, CURRICULUM_WINDOW, steps=True))
        snap["recent_rates"] = {r[0]: (r[2], r[1]) for r in rows}
        snap["recent_steps"] = {r[0]: (r[3], r[1]) for r in rows}  # mean episode length: shares by steps
        _, rows, _ = execute(settings, Q.last_n_scores(policy, CURRICULUM_WINDOW))
        snap["recent_scores"] = {r[0]: (r[2], r[1]) for r in rows}
        _, rows, _ = execute(settings, Q.totals(policy))
        snap["episodes"] = sum(r[1] for r in rows)
        _, rows, _ = execute(settings, Q.latest_versions(policy, settings.topic_prefix))
        if rows:
            snap["published"], snap["acting"], snap["updates"], snap["dlq"] = rows[0]
    except Exception as exc:  # noqa: BLE001 - progress must never stop the run
        snap["error"] = str(exc)[:120]
    try:
        snap["lag"] = run_lags(settings, prefix)
    except Exception:  # noqa: BLE001
        pass
    return snap


def run_lags(settings: Settings, prefix: str) -> dict[str, int]:
    """The run's consumer groups (named ``<prefix><role>``) -> messages they have not committed.
    A group with no commit yet is left out (its lag is unknown, not 0): the rollout group before
    its first finished episode would otherwise read as an empty task queue, and every feed tick
    would send another full queue."""
    lag = consumer_lag(settings, group_prefix=prefix)  # the run's groups only: this is read every second
    return {g.removeprefix(prefix): sum(t.values()) for g, t in lag.items() if g.startswith(prefix) and t}


def feed_tick(feed: TaskFeed, settings: Settings, prefix: str, snap: dict, trainer: bool = True) -> None:
    """One refill of the curriculum's queue, from the groups' lag now (the rollout group's is the
    task queue, the trainer's its unread trajectories) and the last progress reading's rates and
    mean episode lengths.
    ``trainer``: whether a trainer still runs; after the DPO phase stopped it, its group's lag only
    grows and would stop the feed for good, so the queue alone bounds it."""
    try:
        lags = run_lags(settings, prefix)
        feed.refill(lags.get("rollout"), snap.get("recent_rates", {}), snap.get("recent_scores", {}),
                    lags.get("trainer") if trainer else None, snap.get("recent_steps", {}))
    except Exception as exc:  # noqa: BLE001 - the next tick tops the queue up again
        log.warning("task feed: refill failed (%s); retrying at the next tick", exc)


def format_progress(elapsed_s: float, snap: dict, phase: str = "") -> str:
    scores = snap.get("scores", {})  # a game's figure is its normalised score, not its success
    rates = " ".join(f"{t} {'score ' if t in scores else ''}{r:.2f}({n})"
                     for t, (r, n) in sorted({**snap.get("rates", {}), **scores}.items())) or "-"
    lags = dict(snap.get("lag", {}))
    queued = lags.pop("rollout", None)  # the rollout group's lag is the task queue (the curriculum keeps it short), not a backlog
    lag = " ".join(f"{g}={v}" for g, v in sorted(lags.items())) or "-"
    m, s = divmod(int(elapsed_s), 60)
    line = (f"[{m:02d}:{s:02d}]{' ' + phase if phase else ''} episodes {snap.get('episodes', 0)} | last-100 success {rates} | "
            f"policy v{snap.get('published', '-')} acting v{snap.get('acting', '-')} | "
            f"updates {snap.get('updates', '-')} | {'' if queued is None else f'tasks queued {queued} | '}"
            f"lag {lag} | dlq {snap.get('dlq', '-')}")
    if snap.get("error"):
        line += f" | ({snap['error']})"
    return line


FEED_TICK_S = 1.0  # how often the task queue is topped up (progress lines come every progress_s)


def task_feed(cfg: DemoConfig, settings: Settings, run_id: str, tasks: list[str], max_steps: int,
              guide: dict[str, list] | None = None) -> TaskFeed:
    """The RL task feed of a run (``tasks``: the plan's, suites expanded): a queue of 8 tasks per
    sandbox, 64 at least, less the trainer's unread trajectories beyond one batch; ``guide``: where
    the exploration floor clicks per task (``explore_guide``)."""
    sandboxes = (cfg.sandboxes or machine_sandboxes(cfg.workers)) * cfg.workers
    return TaskFeed(list(tasks), max(64, 8 * sandboxes), phases.rl_seed(cfg.seed), max_steps, f"{run_id}.rl",
                    lambda specs: phases.send_tasks(settings, specs), cfg.episodes, allowance=cfg.batch_episodes,
                    explore=cfg.explore, points=guide)


def explore_guide(cfg: DemoConfig, demos: list | None) -> dict[str, list]:
    """--explore-from human: per task of the run, where its recorded demonstrations clicked
    (app.curriculum.guide_points); {} without the option; UserError when none of the run's tasks
    has a demonstration with a click."""
    if not cfg.explore_from:
        return {}
    tasks = set(cfg.plan().tasks)
    guide = {t: p for t, p in guide_points(demos or []).items() if t in tasks}
    if not guide:
        raise UserError(f"--explore-from {cfg.explore_from}: no recorded demonstration with a click of the run's "
                        f"tasks ({', '.join(sorted(tasks))}) on this platform's topics: record some in `flywheel ui`'s "
                        f"Annotate view first")
    return guide


def _roots(children: list[Child]) -> dict[str, int]:
    """The running children's pids by name: the processes whose CPU the report shares out."""
    return {c.name: c.proc.pid for c in children if c.proc is not None and c.alive}


@dataclass
class Learner:
    """The trainer's half of a run, as the phases the trainer runs drive it (``phase_list.Learner``):
    started once (the trainer, awaited until it published; the rollout workers; the reflection
    annotator of a run with a DPO phase; the task feed), then one tick at a time: the feed every
    ``FEED_TICK_S``, and every ``progress_s`` a reading (a dead child fails the run; CPU shares
    sampled; the progress line printed). ``snap``: the last reading (the run's outcome reads it)."""

    cfg: DemoConfig
    settings: Settings
    env: dict[str, str]
    run_id: str
    prefix: str  # the run's topic and consumer group prefix
    policy: str
    plan: RunPlan
    logs: Path
    children: list[Child]  # the run's, the learner's among them (the DPO phase changes the list)
    clock: phases.PhaseClock
    notes: list[str]
    t0: float
    base_version: int = 0
    dpo_version: int | None = None
    snap: dict = field(default_factory=dict)
    cpu: CpuShare = field(default_factory=CpuShare)  # each process's share, from RL's first task on
    broker: dict[str, int] = field(default_factory=dict)  # the local Kafka's processes, counted beside the children
    feed: TaskFeed | None = None
    guide: dict[str, list] = field(default_factory=dict)  # --explore-from: where the floor clicks (``explore_guide``)
    started: bool = False
    next_line: float = 0.0

    @staticmethod
    def runs(child: Child) -> bool:
        """Whether ``child`` is the learner's (the trainer, a rollout worker), started with it."""
        return child.name == "trainer" or child.name.startswith("rollout-")

    def start(self) -> str:
        """-> what the trainer starts from ('' when the learner already runs)."""
        if self.started:
            return ""
        self.started = True
        cfg, settings = self.cfg, self.settings
        for child in [c for c in self.children if self.runs(c)]:
            child.start()
            if child.name == "trainer":  # rollout acts only with weights the trainer published
                wait_s = min(180.0, max(30.0, self.t0 + cfg.minutes * 60 - time.time()))
                if not wait_until(lambda: not child.alive or _published(settings, self.policy), wait_s, 1.0):
                    raise UserError(f"the trainer published no version within {wait_s:.0f}s (log {child.log_path})")
                self.base_version = _latest_version(settings, self.policy)
        if cfg.dpo_span_s():  # failed episodes -> reflection pairs, while PPO runs
            self.children.append(phases.reflection_annotator(self.env, self.prefix, self.logs,
                                                             cfg.rollout_args).start())
        tasks = list(self.plan.tasks)
        if cfg.curriculum:
            self.feed = task_feed(cfg, settings, self.run_id, tasks, self.plan.max_steps, self.guide)
            self.feed.refill(0, {}, {})
            self.notes.append(f"RL tasks fed by failure rate over the last {CURRICULUM_WINDOW}, shared by steps (app.curriculum), "
                              f"{self.feed.queue} queued less the trajectories the trainer has not read; "
                              "--no-curriculum gives every task the same share")
            if cfg.explore > 0:
                self.notes.append(f"exploration floor {cfg.explore:g} (--explore; on auto 0.5 from random weights on "
                                  f"MiniWoB++ tasks, --explore 0 for none): a task below {EXPLORE_BELOW:g} success "
                                  f"over its last {CURRICULUM_WINDOW} episodes plays with up to that share of its clicks "
                                  f"uniform (all of it at no success, none at {EXPLORE_BELOW:g}), logged with the "
                                  "mixture's log-prob (app.curriculum.exploring)")
            if self.guide:
                self.notes.append(f"the exploration floor guided by {cfg.explore_from} demonstrations (--explore-from; "
                                  f"not cloned): "
                                  + ", ".join(f"{t} {len(p)} clicks" for t, p in sorted(self.guide.items()))
                                  + " draw its share near where they clicked at the same step (app.curriculum.guide_points)")
        else:
            phases.submit(self.env, self.logs, tasks, cfg.episodes, self.plan.max_steps, phases.rl_seed(cfg.seed))
        self.cpu, self.broker = CpuShare(), broker_processes(settings)
        self.cpu.sample({**_roots(self.children), **self.broker}, own="demo")
        self.next_line = time.time() + cfg.progress_s
        return f"the trainer starts from v{self.base_version}"

    def tick(self) -> dict | None:
        """-> a reading every ``progress_s`` (None between them); UserError when a child died."""
        time.sleep(min(FEED_TICK_S, self.cfg.progress_s))
        if self.feed is not None:  # every second: a trainer that caught up gets the next episodes at once
            feed_tick(self.feed, self.settings, self.prefix, self.snap,
                      trainer=any(c.name == "trainer" for c in self.children))
        if time.time() < self.next_line:
            return None
        self.next_line = time.time() + self.cfg.progress_s
        self.cpu.sample({**_roots(self.children), **self.broker}, own="demo")
        dead = [c for c in self.children if not c.alive]
        if dead:
            c = dead[0]
            raise UserError(f"{c.name} exited with code {c.returncode()}: {c.tail(3)} (log {c.log_path})")
        self.snap = snapshot(self.settings, self.policy, self.prefix)
        self.show(self.snap)
        return self.snap

    def show(self, snap: dict) -> None:
        print(format_progress(time.time() - self.t0, snap, self.clock.current), flush=True)

    def dpo(self) -> None:
        def tick() -> None:  # progress while DPO runs
            self.show(snapshot(self.settings, self.policy, self.prefix))

        self.dpo_version = _dpo_phase(self.cfg, self.settings, self.env, self.children, self.policy,
                                      self.base_version, self.logs, self.clock, self.notes, tick)


class Terminated(KeyboardInterrupt):
    """SIGTERM, or SIGHUP (the terminal closed, an ssh session dropped): the demo stops as on
    Ctrl-C (its children and broker stopped, the report written)."""

    def __init__(self, signame: str = "SIGTERM") -> None:
        super().__init__(signame)
        self.signame = signame


def _terminate_once(stop: phases.Stop):
    """A SIGTERM, SIGHUP and SIGINT handler: the first signal sets ``stop`` (its reason: the
    signal) and raises ``Terminated`` (SIGTERM, SIGHUP) or KeyboardInterrupt (Ctrl-C) wherever the
    run is (a blocking step included: its own cleanup stops it). A further signal lets the stopping
    of processes finish (a second Ctrl-C, or a supervisor's SIGTERM after it, cut the cold start's
    stop of its rollout worker short and left that worker running); only while
    ``stop.interruptible`` (the report is being written) does it raise again, skipping the rest of
    the report."""
    def handler(signum, frame) -> None:
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if stop.set(f"stopped by {name}"):
            raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated(name)
        if stop.interruptible:
            stop.interruptible = False
            raise KeyboardInterrupt()
        _say("already stopping: the run stops its processes (once they are, another Ctrl-C skips the report)")
    return handler


def run_demo(cfg: DemoConfig, settings: Settings) -> Path:
    """The whole run, decided before anything starts (``effective``: the cold start, the tasks
    without a demonstrator). Every exit (a phase failing, a child dying, Ctrl-C, SIGTERM, the
    report failing) stops each child still running and the broker this run started (unless
    --keep-broker); the last line says what is left running."""
    cfg = cfg.validate()  # before the broker is asked for anything
    asked = [f"--{k.replace('_', '-')} human" for k in ("demos_from", "explore_from") if getattr(cfg, k) == "human"]
    recorded = phases.human_demonstrations(settings, asked=" and ".join(asked)) if asked else None
    human = recorded if cfg.demos_from == "human" else None  # cloned by the cold start
    cfg, cold, changed = effective(cfg, None if human is None else
                                   frozenset(s.trajectory.task.name for s in human))
    guide = explore_guide(cfg, recorded)
    run_id, prefix, policy = run_names(cfg)
    settings = load_settings({**asdict(settings), "topic_prefix": prefix})
    checked = check_child_options(cfg, cold, (run_id, prefix, policy), settings)
    for line in (*cold.lines, *changed):
        print(line, flush=True)
    broker = broker_to_start(settings)
    children: list[Child] = []
    stop = phases.Stop()
    previous = {s: signal.signal(s, _terminate_once(stop)) for s in stop_signals()}
    try:
        return _run(Decided(cfg, cold, (run_id, prefix, policy), changed, checked, human, guide), settings, broker,
                    children, stop)
    finally:
        stop.set("the run ended")  # from here a signal lets the cleanup finish
        stop.interruptible = False
        try:
            left = stop_children(children)  # after a failure: the run's own stop did not happen
            if left:
                _say(left)
            _say(leave_platform(settings, broker, cfg.keep_broker))
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


@dataclass(frozen=True)
class Decided:
    """What run_demo decides before anything starts."""

    cfg: DemoConfig  # the effective configuration (``effective``)
    cold: phases.ColdStart  # the cold start, and the tasks without a demonstrator
    names: tuple[str, str, str]  # run id, topic prefix, policy name
    changed: list[str]  # what the resolution changed, said to the user
    checked: Checked  # what ``check_child_options`` resolved (the trainer's configuration, the judged tasks)
    human: list | None = None  # the people's demonstrations the cold start clones (--demos-from human)
    guide: dict[str, list] | None = None  # --explore-from's points per task (``explore_guide``)


def _run(decided: Decided, settings: Settings, broker, children: list[Child], stop: phases.Stop) -> Path:
    """Start the platform and the children (appended to ``children`` as they are planned, for
    run_demo to stop whatever happens), run the phases until the deadline, stop the children and
    write the report; -> its path."""
    cfg, cold, changed, checked, human, guide = (decided.cfg, decided.cold, decided.changed, decided.checked,
                                                 decided.human, decided.guide)
    run_id, prefix, policy = decided.names
    budget = phase_list.Budget(time.time(), cfg.minutes)  # --minutes bounds the whole run, its start-up included
    plan = cfg.plan()
    trainer = checked.trainer
    train = trainer.train
    out = Path(cfg.report_dir) if cfg.report_dir else settings.data_path / "reports" / run_id
    logs = out / "logs"
    start = start_from.parse(cfg.start_from, RUN_ID) if cfg.start_from else None
    places = start_from.report_places(start, settings.data_path, cfg.report_dir) if start else []
    taught_by = taught.taught_of(cfg.cold_start_demos, cfg.demos_from, cfg.demo_noise, train, cfg.explore_from,
                                 checked.judged, str(start or ""),
                                 start_from.taught_by(places, start.version) if start else "")
    print(demo_report.header(cfg, run_id, policy, plan, train, budget, logs, taught_by), flush=True)
    log.info("demo config %s", describe(cfg))
    log.info("trainer config %s", trainer.record())
    ensure_platform(settings, broker)
    claim_run_id(settings, run_id, policy)  # its topics, versions, checkpoint and rows would mix with this run's
    if start:  # before the trainer starts: it continues from the newest published version
        pv = start_from.copy_into(settings, start, cfg.policy_kind, policy)
        print(f"starting from {cfg.start_from}: published as {policy} v{pv.version}", flush=True)
        if start.version is None:  # the version is known now: what taught it, for the report
            taught_by = replace(taught_by, start_from=f"{start}@{pv.version}",
                                start_taught=start_from.taught_by(places, pv.version))
            print(taught.line(taught_by), flush=True)
    logs.mkdir(parents=True, exist_ok=True)  # after the claim: a run's logs mean its run id is spent
    config = demo_report.record(cfg, settings, prefix, policy, plan, cold, trainer, taught_by)
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
    children += plan_children(cfg, settings, prefix, policy, logs, plan, trainer)
    env = child_env(settings, prefix)
    if cfg.ui:  # first to start, last to stop: the page shows the whole run
        ui_port = free_port_block(1)
        token = secrets.token_urlsafe(18)  # the UI writes training data: only who has the URL may
        children.insert(0, ui_child(ui_port, token, logs, env))
        print(f"ui: http://127.0.0.1:{ui_port}/?token={token}&run={policy}", flush=True)
    notes: list[str] = list(changed)
    clock = phases.PhaseClock()
    learner = Learner(cfg, settings, env, run_id, prefix, policy, plan, logs, children, clock, notes, budget.t0,
                      guide=dict(guide or {}))
    ctx = phase_list.Ctx(cfg, settings, env, prefix, policy, plan, cold, logs, clock, stop, human, notes, learner)
    try:
        for child in [c for c in children if not learner.runs(c)]:  # the platform (and the UI)
            child.start()
            if child.name == "sink":  # the query endpoint must be up before progress reads
                wait_until(lambda: not child.alive or _endpoint_up(settings), 60)
        phase_list.run_phases(ctx, budget)  # each phase of the run, to its deadline
        final = snapshot(settings, policy, prefix)  # the run's last reading: did it make an RL update?
        learner.snap = final if "published" in final else learner.snap
    except KeyboardInterrupt as exc:
        notes.append(f"stopped by {exc.signame}" if isinstance(exc, Terminated) else "stopped by Ctrl-C")
    finally:
        stop.set("the run ended")  # a SIGTERM from here on lets the stopping finish
        ended = time.time()
        clock.close(ended)
        no_rl = rl_outcome(learner.base_version, learner.snap, out)
        if no_rl:
            notes.append(no_rl)
            _say(no_rl)
        _say("stopping: rollout workers, then the stream processors, trainer and sink")
        _say(stop_children(children) or "no child was running")
    stop.interruptible = True  # the processes are stopped: a further Ctrl-C may skip the report
    # local: loads Pillow, clickhouse-connect, needed only on this path
    from app.report import RunInfo

    run = RunInfo(run_id, policy, "sync" if cfg.sync else "async", budget.t0, ended, config, notes)
    path = demo_report.write(settings, cfg, run, out, learner, clock, taught_by)
    _say(f"report: {path}")  # after a SIGHUP the terminal is gone: the report is written all the same
    return path


def _dpo_phase(cfg: DemoConfig, settings: Settings, env: dict[str, str], children: list[Child], policy: str,
               reference: int, logs: Path, clock: phases.PhaseClock, notes: list[str], tick=None) -> int | None:
    """Stop PPO and the annotator for good and pause the rollout workers, so DPO has every core
    (demo lm40-s2: with 4 sandboxes and the language policy acting beside it, one DPO epoch of 32
    pairs took 9 minutes instead of 1.5, and DPO ran out of time); then DPO of pi_sft, and the
    workers start again, acting with its version (PPO's last if DPO failed). -> the DPO version."""
    paused = [c for c in children if c.name.startswith("rollout-")]
    for child in children:
        if child.name in ("trainer", "reflection") or child in paused:
            child.stop(grace=60)
    children[:] = [c for c in children if c.name not in ("trainer", "reflection")]
    try:
        return phases.dpo(cfg, settings, env, policy, reference, logs, clock, timeout_s=max(cfg.dpo_span_s() - 30, 60),
                          tick=tick)
    except UserError as exc:  # the run goes on with the PPO policy; the report says why
        notes.append(f"DPO phase failed: {exc}")
        clock.note(f"failed: {exc}")
        return None
    finally:
        for child in paused:
            child.start()


def _published(settings: Settings, policy: str) -> bool:
    try:
        return versions.latest(settings, policy) is not None
    except Exception:  # noqa: BLE001 - not yet readable
        return False


def claim_run_id(settings: Settings, run_id: str, policy: str) -> None:
    """Claim ``run_id`` in this data dir, or UserError where it was used before: ``policy`` has
    versions on the broker, or its trainer's checkpoint is kept (a broker started afresh, as a
    benchmark's, holds no versions of earlier runs), or a ClickHouse server holds its episodes
    (they outlive a data dir), or the claim exists (``<data dir>/runs/<id>``, made here atomically
    before anything starts: a run stopped before its trainer began, or a second demo of the same
    id at the same time)."""
    claim = settings.data_path / "runs" / run_id
    if _published(settings, policy):
        used = f"{policy} has published versions"
    elif (settings.checkpoint_root / policy).exists():
        used = f"{policy} has a trainer checkpoint in {settings.checkpoint_root / policy}"
    elif settings.clickhouse_url and _scored_on_server(settings, policy):
        used = f"the ClickHouse server holds episodes of {policy}"
    else:
        try:
            claim.parent.mkdir(parents=True, exist_ok=True)
            claim.mkdir()
            (claim / "started.txt").write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n")
            return
        except FileExistsError:
            used = (f"claimed by a demo: {claim}; if that demo failed before it played anything, deleting the "
                    "folder frees the id")
        except OSError as exc:
            raise UserError(f"cannot claim run id {run_id!r} in the data dir ({exc}): is it writable?") from None
    raise UserError(f"run id {run_id!r} was used before in this data dir ({used}): give another --run-id, or "
                    "leave it out for a fresh one")


def _scored_on_server(settings: Settings, policy: str) -> bool:
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.query import execute

    names = ", ".join(Q.q(p) for p in (policy, phases.scripted_policy(policy)))
    _, rows, _ = execute(settings, f"SELECT count() FROM scored WHERE policy IN ({names})")
    return bool(rows and rows[0][0])


def _latest_version(settings: Settings, policy: str) -> int:
    latest = versions.latest(settings, policy)
    return latest.version if latest is not None else 0


def _endpoint_up(settings: Settings) -> bool:
    # local: loads chdb, clickhouse-connect, needed only on this path
    from infra.clickhouse.endpoint import find_endpoint

    return settings.clickhouse_url != "" or find_endpoint(settings) is not None
